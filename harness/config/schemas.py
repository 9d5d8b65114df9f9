"""The JSON Schemas of the config files, generated from their pydantic models (so an editor
can validate a pin, a scenario or a host profile as it is typed): `harness pin schema` writes
them, and docs/pin-schema.md, docs/scenario-schema.md and docs/hosts.md are tested against
them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from harness.config.causes import CausesModel
from harness.config.hostprofile import HostProfileModel
from harness.config.models import PinModel
from harness.config.scenario import ScenarioModel
from harness.config.transform import TransformModel

MODELS: dict[str, type[BaseModel]] = {
    "pin": PinModel,
    "scenario": ScenarioModel,
    "transform": TransformModel,
    "causes": CausesModel,
    "host": HostProfileModel,
}
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def json_schemas() -> dict[str, dict[str, Any]]:
    """name → its JSON Schema (draft 2020-12), one per config file kind."""
    out: dict[str, dict[str, Any]] = {}
    for name, model in MODELS.items():
        schema = model.model_json_schema()
        out[name] = {"$schema": DRAFT, **schema, "title": f"harness {name} file"}
    return out


def schema_keys(schema: dict[str, Any]) -> set[str]:
    """Every key a schema names: the properties of the top object and of each definition."""
    keys: set[str] = set()
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                keys.update(props)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return keys
