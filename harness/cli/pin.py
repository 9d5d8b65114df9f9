"""`harness pin show|verify|update|fetch|schema`: look at, check, refresh or clone an upstream
pin; write the JSON Schemas of the config files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness import outcome
from harness.config import pin as pinmod
from harness.config.defaults import default_pin
from harness.config.schemas import json_schemas
from harness.errors import HarnessError
from harness.files import atomic_write
from harness.outcome import USAGE, PinVerifyExit
from harness.report.model import plain
from harness.source import git as gitsource
from harness.source import gitrepo, verify_source
from harness.source.verify import describe_verification
from harness.vocab import SourceKind, SourceStatus

NAME = "pin"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        epilog=outcome.exit_help("pin verify"),
        help="show, verify, update or fetch an upstream pin; write the config schemas",
        description="show: the pin as resolved (with what it extends); verify: compare the "
        "source with the pin; update: write the "
        "checkout's commit and file hashes into the pin file; fetch: clone the pinned commit; "
        "schema: the JSON Schemas of pin, scenario, transform and causes files (one JSON "
        "object on stdout, or one <name>.schema.json each in --out DIR).",
    )
    p.add_argument(
        "action", choices=["show", "verify", "update", "fetch", "schema"], help="what to do"
    )
    p.add_argument(
        "--pin",
        default=None,
        help="pin name or .toml path (default: replica, or pufferlib-5.0 with a checkout)",
    )
    p.add_argument("--checkout", type=Path, help="the upstream's git checkout (git pins)")
    p.add_argument("--dest", type=Path, help="fetch: where to clone (default: the harness cache)")
    p.add_argument("--json", action="store_true", help="verify: the verification as JSON")
    p.add_argument("--out", type=Path, help="schema: the folder to write the schemas into")


def command(args: argparse.Namespace) -> int:
    """pin show | verify | update | fetch | schema; verify exits with outcome.PinVerifyExit."""
    if args.action == "schema":
        return _schema(args.out)
    pin = pinmod.load_pin(args.pin or default_pin(args.checkout))
    if args.action == "show":
        print(pinmod.describe_pin(pin))
        return 0
    if args.action == "fetch":
        print(f"harness: {pin.name} checked out at {gitsource.fetch_checkout(pin, args.dest)}")
        return 0
    if args.action == "update":
        return _update(pin, args.checkout)
    verification, _root = verify_source(pin, args.checkout)
    if args.json:
        print(json.dumps(plain(verification), indent=2))
    else:
        print(describe_verification(pin, verification))
    codes = {SourceStatus.VERIFIED: PinVerifyExit.VERIFIED, SourceStatus.DRIFT: PinVerifyExit.DRIFT}
    return codes.get(verification.status, PinVerifyExit.UNVERIFIED)


def _update(pin: pinmod.Pin, checkout: Path | None) -> int:
    if pin.source.kind == SourceKind.PATH:
        root, commit = pin.source_root, None
    elif pin.source.kind == SourceKind.GIT:
        root = gitsource.locate_checkout(pin, checkout)
        gitrepo.open_repo(root)
        commit = gitrepo.head_commit(root)
        if not gitrepo.commit_matches(pin.source.commit, commit):
            raise HarnessError(
                f"{root} is at {commit[:12]}, not the pinned {pin.source.commit}: check out the "
                "pinned commit first (or edit the pin's commit on purpose)",
                USAGE,
            )
        dirty = gitrepo.dirty_paths(root)
        if dirty:
            raise HarnessError(
                f"{root} has uncommitted changes ({', '.join(dirty[:5])}): refusing to hash them",
                USAGE,
            )
    else:
        raise HarnessError(
            f"pin update is for git and path pins; {pin.name} is {pin.source.kind}", USAGE
        )
    assert root is not None
    changes = gitsource.update_pin_file(pin, root, commit)
    print("\n".join(changes) if changes else "harness: pin already up to date")
    print(f"harness: wrote {pin.file}")
    return 0


def _schema(out: Path | None) -> int:
    """The JSON Schemas, generated from the models that validate the files."""
    schemas = json_schemas()
    if out is None:
        print(json.dumps(schemas, indent=2))
        return 0
    if out.exists() and not out.is_dir():
        raise HarnessError(f"--out {out}: not a folder", USAGE)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, schema in schemas.items():
            path = out / f"{name}.schema.json"
            atomic_write(path, json.dumps(schema, indent=2) + "\n")
            print(f"harness: wrote {path}")
    except OSError as exc:
        raise HarnessError(f"--out {out}: cannot write: {exc.strerror or exc}", USAGE) from None
    return 0
