"""``msc://profile/prefix``: Energon's multi-storage-client URLs, mapped onto our S3 client.

The profile is looked up in MSC's configuration file, found the way MSC finds it: the
``MSC_CONFIG`` variable, then ``$XDG_CONFIG_HOME/msc/config.{yaml,json}``,
``~/.msc_config.{yaml,json}``, ``~/.config/msc/config.{yaml,json}``, ``/etc/xdg/msc/...``,
``/etc/msc_config.{yaml,json}``. A profile's ``storage_provider`` of type ``s3`` (or an
S3-compatible type: ``s8k``, ``gcs_s3``, ``ais_s3``) gives ``base_path: bucket/prefix``,
``endpoint_url`` and ``region_name``; a ``credentials_provider`` of type ``S3Credentials``
gives ``access_key``, ``secret_key`` and ``session_token``. A ``file`` provider maps the
profile onto a local folder. ``${VAR}`` in values is taken from the environment, as MSC does.

As in MSC, profiles may also come from rclone's configuration file (``rclone.conf`` beside the
``rclone`` executable, ``$XDG_CONFIG_HOME/rclone/rclone.conf``, ``/etc/rclone.conf``,
``~/.config/rclone/rclone.conf``, ``~/.rclone.conf``): a section ``[name]`` of ``type = s3``
(or ``s8k``, ``gcs_s3``) is the profile ``name``, its ``endpoint``, ``region``,
``access_key_id``, ``secret_access_key``, ``session_token`` and ``base_path`` read as MSC
reads them. Without ``base_path`` the URL's first folder is the bucket
(``msc://name/bucket/prefix``). A profile named in both files is taken from MSC's file.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
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


def rclone_config_path() -> Path | None:
    """rclone's configuration file, searched where MSC searches it."""
    exe = shutil.which("rclone")
    candidates = [Path(exe).with_name("rclone.conf")] if exe else []
    if os.environ.get("XDG_CONFIG_HOME"):
        candidates.append(Path(os.environ["XDG_CONFIG_HOME"], "rclone", "rclone.conf"))
    candidates.append(Path("/etc/rclone.conf"))
    home = os.environ.get("HOME", "")
    candidates += [Path(home, ".config", "rclone", "rclone.conf"), Path(home, ".rclone.conf")]
    return next((p for p in candidates if p.is_file()), None)


# rclone key -> MSC key, as MSC maps an rclone section of an S3-compatible type
_RCLONE_STORAGE = {"endpoint": "endpoint_url", "region": "region_name", "base_path": "base_path"}
_RCLONE_CREDENTIALS = {
    "access_key_id": "access_key",
    "secret_access_key": "secret_key",
    "session_token": "session_token",
}


def _rclone_profiles(source: Path) -> dict[str, Any]:
    """The S3-compatible and ``file`` sections of an rclone config, as MSC profile entries."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(source, encoding="utf-8")
    except configparser.Error as exc:
        raise ConfigError(f"{source}: not a valid rclone config: {type(exc).__name__}") from None
    profiles: dict[str, Any] = {}
    for name in parser.sections():
        section = parser[name]
        kind = section.get("type", "").lower()
        if kind == "file":
            options = {k: v for k, v in section.items() if k != "type"}
            profiles[name] = {"storage_provider": {"type": "file", "options": options}}
            continue
        if kind not in _S3_TYPES:
            continue  # MSC maps other types (azure, gcs, ...), which energon_lite does not read
        storage = {ours: section[key] for key, ours in _RCLONE_STORAGE.items() if key in section}
        entry: dict[str, Any] = {"storage_provider": {"type": kind, "options": storage}}
        creds = {ours: section[key] for key, ours in _RCLONE_CREDENTIALS.items() if key in section}
        if "access_key" in creds:
            entry["credentials_provider"] = {"type": "S3Credentials", "options": creds}
        profiles[name] = entry
    return profiles


def _read_msc_config(source: Path) -> dict[str, Any]:
    text = source.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if source.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{source}: not valid YAML/JSON: {type(exc).__name__}") from None
    profiles = data.get("profiles") if isinstance(data, dict) else None
    if profiles is not None and not isinstance(profiles, dict):
        raise ConfigError(
            f"{source}: profiles: a mapping of profile names, not {type(profiles).__name__}"
        )
    return profiles or {}


def load_profile(profile: str) -> MscProfile:
    """The profile's location and client options; errors name the file, never a secret."""
    msc_file = next((p for p in config_paths() if p.is_file()), None)
    rclone_file = rclone_config_path()
    if msc_file is None and rclone_file is None:
        raise ConfigError(
            f"msc://{profile}/...: no MSC config file found; set MSC_CONFIG, write "
            "~/.msc_config.yaml or an rclone config (see docs/remote.md)"
        )
    known: list[str] = []
    found: tuple[Path, dict[str, Any]] | None = None
    for source, read in ((msc_file, _read_msc_config), (rclone_file, _rclone_profiles)):
        if source is None:
            continue
        profiles = read(source)
        if profile in profiles:
            found = (source, profiles)
            break
        known += sorted(profiles)
    if found is None:
        files = " and ".join(str(p) for p in (msc_file, rclone_file) if p is not None)
        raise ConfigError(f"{files}: no profile {profile!r}; profiles there: {known}")
    source, profiles = found
    entry = profiles[profile] or {}
    provider = entry.get("storage_provider") or {}
    kind, options = provider.get("type"), provider.get("options") or {}
    base = str(_expand(options.get("base_path", ""))).strip("/")
    label = f"[{profile}]" if source == rclone_file else f"profiles.{profile}"
    where = f"{source}: {label}.storage_provider"
    if kind == "file":
        return MscProfile("file", "/" + base)
    if kind not in _S3_TYPES:
        raise ConfigError(f"{where}.type: {kind!r}; energon_lite reads {[*_S3_TYPES, 'file']}")
    s3: dict[str, Any] = {}
    if options.get("endpoint_url"):
        s3["endpoint_url"] = _expand(options["endpoint_url"])
    if options.get("region_name"):
        s3["region_name"] = _expand(options["region_name"])
    creds = entry.get("credentials_provider") or {}
    if creds:
        if creds.get("type") not in ("S3Credentials", None):
            raise ConfigError(
                f"{source}: {label}.credentials_provider.type: {creds.get('type')!r}; "
                "energon_lite reads S3Credentials (or none: the AWS environment)"
            )
        copts = creds.get("options") or {}
        for ours, theirs in (("key", "access_key"), ("secret", "secret_key"), ("token", "session_token")):  # fmt: skip
            if copts.get(theirs):
                s3[ours] = _expand(copts[theirs])
    return MscProfile("s3", base, s3)
