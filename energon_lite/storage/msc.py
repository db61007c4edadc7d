"""``msc://profile/prefix``: Energon's multi-storage-client URLs, mapped onto our S3 client.

The profile is looked up in MSC's configuration file, found the way MSC finds it: the
``MSC_CONFIG`` variable, then ``$XDG_CONFIG_HOME/msc/config.{yaml,json}``,
``~/.msc_config.{yaml,json}``, ``~/.config/msc/config.{yaml,json}``, ``/etc/xdg/msc/...``,
``/etc/msc_config.{yaml,json}``. A profile's ``storage_provider`` of type ``s3`` (or an
S3-compatible type: ``s8k``, ``gcs_s3``, ``ais_s3``) gives ``base_path: bucket/prefix``,
``endpoint_url`` and ``region_name``; a ``credentials_provider`` of type ``S3Credentials``
gives ``access_key``, ``secret_key`` and ``session_token``. A ``file`` provider maps the
profile onto a local folder. ``${VAR}`` in values is taken from the environment, as MSC does.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from energon_lite.errors import ConfigError

_S3_TYPES = ("s3", "s8k", "gcs_s3", "ais_s3")


def config_paths() -> list[Path]:
    """MSC's configuration search order."""
    paths: list[Path] = []
    if os.environ.get("MSC_CONFIG"):
        paths.append(Path(os.environ["MSC_CONFIG"]))
    names = ("config.yaml", "config.json")
    if os.environ.get("XDG_CONFIG_HOME"):
        paths += [Path(os.environ["XDG_CONFIG_HOME"], "msc", n) for n in names]
    home = os.environ.get("HOME")
    if home:
        paths += [Path(home, ".msc_config.yaml"), Path(home, ".msc_config.json")]
        paths += [Path(home, ".config", "msc", n) for n in names]
    for folder in (os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":"):
        if folder.strip():
            paths += [Path(folder.strip(), "msc", n) for n in names]
    return [*paths, Path("/etc/msc_config.yaml"), Path("/etc/msc_config.json")]


@dataclass
class MscProfile:
    """Where an MSC profile's objects live and how to reach them."""

    kind: str  # "s3" or "file"
    base: str  # "bucket/prefix" for s3, a local folder for file
    options: dict[str, Any] = field(default_factory=dict)  # s3fs arguments (secrets inside)


def _expand(value: Any) -> Any:
    return os.path.expandvars(value) if isinstance(value, str) else value


def load_profile(profile: str) -> MscProfile:
    """The profile's location and client options; errors name the file, never a secret."""
    source = next((p for p in config_paths() if p.is_file()), None)
    if source is None:
        raise ConfigError(
            f"msc://{profile}/...: no MSC config file found; set MSC_CONFIG or write "
            "~/.msc_config.yaml (see docs/remote.md)"
        )
    text = source.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if source.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{source}: not valid YAML/JSON: {type(exc).__name__}") from None
    profiles = data.get("profiles") if isinstance(data, dict) else None
    if not isinstance(profiles, dict) or profile not in profiles:
        known = sorted(profiles) if isinstance(profiles, dict) else []
        raise ConfigError(f"{source}: no profile {profile!r} under 'profiles'; it has {known}")
    entry = profiles[profile] or {}
    provider = entry.get("storage_provider") or {}
    kind, options = provider.get("type"), provider.get("options") or {}
    base = str(_expand(options.get("base_path", ""))).strip("/")
    where = f"{source}: profiles.{profile}.storage_provider"
    if kind == "file":
        return MscProfile("file", "/" + base)
    if kind not in _S3_TYPES:
        raise ConfigError(f"{where}.type: {kind!r}; energon_lite reads {[*_S3_TYPES, 'file']}")
    if not base:
        raise ConfigError(f"{where}.options.base_path: missing; give bucket or bucket/prefix")
    s3: dict[str, Any] = {}
    if options.get("endpoint_url"):
        s3["endpoint_url"] = _expand(options["endpoint_url"])
    if options.get("region_name"):
        s3["region_name"] = _expand(options["region_name"])
    creds = entry.get("credentials_provider") or {}
    if creds:
        if creds.get("type") not in ("S3Credentials", None):
            raise ConfigError(
                f"{source}: profiles.{profile}.credentials_provider.type: {creds.get('type')!r}; "
                "energon_lite reads S3Credentials (or none: the AWS environment)"
            )
        copts = creds.get("options") or {}
        for ours, theirs in (("key", "access_key"), ("secret", "secret_key"), ("token", "session_token")):  # fmt: skip
            if copts.get(theirs):
                s3[ours] = _expand(copts[theirs])
    return MscProfile("s3", base, s3)
