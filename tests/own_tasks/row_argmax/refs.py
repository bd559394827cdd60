"""The reference of row_argmax, imported from the task's folder."""

import numpy as np


def row_argmax(xp, x, sizes):
    return {"idx": xp.argmax(x["x"], axis=1).astype(np.float64)}
