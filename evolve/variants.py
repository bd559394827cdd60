"""The variants of a run, kept in the study so that any process can find them.

Metadata lives in study user attributes (``variant:<id>``) and each source is an artifact of
the study: readable in optuna-dashboard, fetched by a resumed run or another evaluator, and
never stored in an attribute (MySQL caps those at 64 KiB).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import download_artifact, upload_artifact

from evolve.errors import EvolveError, SpecError
from evolve.record import ArtifactStore, StudyAttr
from evolve.spec import Variant

PREFIX = StudyAttr.VARIANT_PREFIX


class VariantStore:
    def __init__(self, study: optuna.Study, artifacts: ArtifactStore):
        self.study, self.artifacts = study, artifacts
        self._variants: dict[str, Variant] = {}
        self.meta: dict[str, dict[str, Any]] = {}

    def load(self) -> None:
        """Read every variant the study already holds (a resumed run)."""
        for attr, meta in self.study.user_attrs.items():
            if not attr.startswith(PREFIX) or (vid := attr.removeprefix(PREFIX)) in self._variants:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "kernel.cu"
                try:
                    download_artifact(
                        artifact_store=self.artifacts, file_path=str(path), artifact_id=meta["artifact"]
                    )
                except Exception as exc:
                    raise EvolveError(
                        f"the source of variant {meta.get('name', vid)} is missing from the artifact "
                        f"store ({exc.__class__.__name__}); was storage.artifacts changed?"
                    ) from None
                try:
                    variant = Variant.parse(path.read_text(), name=meta["name"])
                except SpecError as exc:
                    raise EvolveError(f"stored variant {vid} no longer parses: {exc}") from None
            self._variants[vid] = variant
            self.meta[vid] = meta

    def add(self, variant: Variant, operator: str, parents: list[str], **extra: Any) -> bool:
        """Store a new variant; False if one with the same normalized source exists, here or in
        the storage (another process may have stored it)."""
        if variant.id not in self._variants and PREFIX + variant.id in self.study.user_attrs:
            self.load()
        if variant.id in self._variants:
            return False
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{variant.name}.cu"
            path.write_text(variant.source)
            artifact = upload_artifact(
                artifact_store=self.artifacts, file_path=str(path), study_or_trial=self.study,
                mimetype="text/plain", encoding="utf-8",
            )
        meta = {"name": variant.name, "artifact": artifact, "operator": operator, "parents": parents,
                **extra}
        self.study.set_user_attr(PREFIX + variant.id, meta)
        self._variants[variant.id] = variant
        self.meta[variant.id] = meta
        return True

    def get(self, vid: str) -> Variant:
        return self._variants[vid]

    def __contains__(self, vid: object) -> bool:
        return vid in self._variants

    def __iter__(self) -> Iterator[Variant]:
        return iter(self._variants.values())
