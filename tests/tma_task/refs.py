"""The reference of tile_copy, imported from the task's folder."""


def tile_copy(xp, x, sizes):
    return {"out": x["x"]}
