"""The variants of a run, kept in the study so that any process can find them.

Metadata lives in study user attributes (``variant:<id>``) and each source is an artifact of
the study: readable in optuna-dashboard, fetched by a resumed run or another evaluator, and
never stored in an attribute (MySQL caps those at 64 KiB).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import download_artifact, upload_artifact

from evolve.errors import EvolveError, SpecError
from evolve.kernel.spec import Variant
from evolve.record.schema import ArtifactStore, StudyAttr

PREFIX = StudyAttr.VARIANT_PREFIX


@dataclass(frozen=True)
class VariantMeta:
    """What the study records about a variant, besides its source."""

    name: str
    artifact: str  # the id of its source in the artifact store
    operator: str  # record.Op
    parents: list[str]  # variant ids; the first is the one a child is compared with
    island: int | None = None
    model: str | None = None  # an LLM child's: the model that wrote it ...
    tokens: int | None = None  # ... and the tokens it took

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VariantMeta:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


class VariantStore:
    def __init__(self, study: optuna.Study, artifacts: ArtifactStore):
        self.study, self.artifacts = study, artifacts
        self._variants: dict[str, Variant] = {}
        self.meta: dict[str, VariantMeta] = {}

    def load(self) -> None:
        """Read every variant the study already holds (a resumed run)."""
        for attr, value in self.study.user_attrs.items():
            if not attr.startswith(PREFIX) or (vid := attr.removeprefix(PREFIX)) in self._variants:
                continue
            meta = VariantMeta.from_dict(value)
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "kernel.cu"
                try:
                    download_artifact(
                        artifact_store=self.artifacts, file_path=str(path), artifact_id=meta.artifact
                    )
                except Exception as exc:
                    raise EvolveError(
                        f"the source of variant {meta.name} is missing from the artifact "
                        f"store ({exc.__class__.__name__}); was storage.artifacts changed?"
                    ) from None
                try:
                    variant = Variant.parse(path.read_text(), name=meta.name)
                except SpecError as exc:
                    raise EvolveError(f"stored variant {vid} no longer parses: {exc}") from None
            self._variants[vid] = variant
            self.meta[vid] = meta

    def add(self, variant: Variant, operator: str, parents: list[str], island: int | None = None,
            model: str | None = None, tokens: int | None = None) -> bool:
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
        meta = VariantMeta(variant.name, artifact, operator, parents, island, model, tokens)
        self.study.set_user_attr(PREFIX + variant.id, meta.to_dict())
        self._variants[variant.id] = variant
        self.meta[variant.id] = meta
        return True

    def get(self, vid: str) -> Variant:
        return self._variants[vid]

    def __contains__(self, vid: object) -> bool:
        return vid in self._variants

    def __iter__(self) -> Iterator[Variant]:
        return iter(self._variants.values())
