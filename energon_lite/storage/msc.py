"""``msc://profile/prefix``: Energon's multi-storage-client URLs, opened by the
multi-storage-client package itself (the ``msc`` extra), so every profile kind it knows works:
``file`` (POSIX), ``s3`` and its kin (``s8k``, ``gcs_s3``, ``ais_s3``), ``azure``, ``gcs``,
``oci``, ``ais``, ``huggingface``..., with credentials providers, ``${VAR}`` references,
``include``s and rclone sections read by MSC, as in Energon.

The configuration is found as MSC finds it (``MSC_CONFIG``, ``~/.msc_config.yaml``,
``$XDG_CONFIG_HOME/msc/config.yaml``..., and rclone's ``rclone.conf``), and the profile is
changed in three ways before MSC builds its client, so that energon_lite's storage layer stays
the one place where requests are retried, pinned and cached:

* MSC's retry loop makes one attempt (``retry: {attempts: 1}``), and so does the SDK under an
  S3-type profile (botocore ``retries``) or an Azure one (``retry_total: 0``), unless the
  profile sets them: ``retry.call`` counts, backs off and bounds the attempts;
* MSC's own cache is off: remote shards go through energon_lite's node-local shard cache
  (and MSC's retry-loop log lines are dropped: energon_lite logs its retries);
* nothing else: endpoints, credentials and provider options are MSC's.

Errors name the configuration files and the profiles they hold, never a secret.
"""

from __future__ import annotations

import copy
import importlib
import logging
from typing import Any

from energon_lite.errors import ConfigError

# provider types whose SDK client takes botocore's ``retries``
_S3_TYPES = ("s3", "s8k", "gcs_s3", "ais_s3")
# option names (in any provider's options) whose values are secrets, scrubbed from messages
_SECRET_KEYS = ("access_key", "secret_key", "session_token", "account_key", "connection",
                "connection_string", "sas_token", "client_secret", "token", "password",
                "key_content", "pass_phrase")  # fmt: skip


class _OneAttemptLines(logging.Filter):
    """Drops MSC's retry-loop lines ("Attempt 1 failed", "All retry attempts failed"): with one
    attempt they would report as final a fault that energon_lite then retries (and logs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return False


def _msc() -> Any:
    try:
        module = importlib.import_module("multistorageclient")
    except ImportError:
        raise ConfigError(
            "msc:// paths need the multi-storage-client package: pip install 'energon-lite[msc]'"
        ) from None
    retry_log = logging.getLogger("multistorageclient.retry")
    if not any(isinstance(f, _OneAttemptLines) for f in retry_log.filters):
        retry_log.addFilter(_OneAttemptLines())
    return module


def _read_configs(profile: str) -> tuple[dict[str, Any], list[str]]:
    """MSC's and rclone's configuration, merged as MSC merges them, and their file names."""
    msc = _msc()
    from multistorageclient.rclone import read_rclone_config

    try:
        msc_dict, msc_file = msc.StorageClientConfig.read_msc_config()
        # read now, not from MSC's memo of the first call: the environment may have changed
        rclone_dict, rclone_file = getattr(read_rclone_config, "__wrapped__", read_rclone_config)()
    except Exception as exc:  # a malformed file: MSC names it
        raise ConfigError(f"msc://{profile}/...: {type(exc).__name__}: {exc}") from None
    files = [f for f in (msc_file, rclone_file) if f]
    profiles: dict[str, Any] = {}
    merged: dict[str, Any] = {}
    for source, data in ((msc_file, msc_dict), (rclone_file, rclone_dict)):
        data = data or {}
        named = data.get("profiles") or {}
        if not isinstance(named, dict):
            raise ConfigError(f"{source}: profiles: a mapping of profile names, not {type(named).__name__}")  # fmt: skip
        for name, entry in named.items():
            profiles.setdefault(name, entry)  # the MSC file wins over rclone's, as in MSC
        for key, value in data.items():
            merged.setdefault(key, value)
    merged["profiles"] = profiles
    return merged, files


def _tuned(entry: dict[str, Any]) -> dict[str, Any]:
    """The profile with MSC's and the SDK's retries off unless it sets them (see the module doc)."""
    entry = copy.deepcopy(entry) if entry else {}
    entry.setdefault("retry", {"attempts": 1, "delay": 0.0})
    entry.pop("caching_enabled", None)
    provider = entry.get("storage_provider")
    if isinstance(provider, dict):
        options = provider.setdefault("options", {})
        if provider.get("type") in _S3_TYPES:
            options.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
        elif provider.get("type") == "azure":
            options.setdefault("retry_total", 0)
    return entry


def secrets_of(entry: Any) -> tuple[str, ...]:
    """The secret values in a profile's entry (credentials and provider options)."""
    found: list[str] = []

    def walk(value: Any, key: str = "") -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, str(k))
        elif isinstance(value, list):
            for v in value:
                walk(v, key)
        elif isinstance(value, str) and key in _SECRET_KEYS and len(value) >= 4:
            found.append(value)
            if key.startswith("connection"):  # AccountKey=...;SharedAccessSignature=...
                found.extend([p.partition("=")[2] for p in value.split(";") if "Key=" in p or p.startswith("SharedAccessSignature=")])  # fmt: skip

    walk(entry)
    return tuple(found)


def open_client(profile: str) -> tuple[Any, tuple[str, ...]]:
    """A new MSC ``StorageClient`` for ``profile`` and the secrets its messages must not show."""
    msc = _msc()
    from multistorageclient.utils import expand_env_vars

    merged, files = _read_configs(profile)
    profiles = merged["profiles"]
    if profile in profiles:
        profiles[profile] = _tuned(profiles[profile])
        merged.pop("cache", None)  # energon_lite's node cache reads the shards, not MSC's
        secrets = secrets_of(expand_env_vars(copy.deepcopy(profiles[profile])))
    elif profile.startswith("_"):  # MSC's implicit profiles (``__filesystem__``, ``_s3-bucket``)
        secrets = ()
    else:
        where = " and ".join(files) if files else "no MSC config file found"
        hint = "" if files else "; set MSC_CONFIG, write ~/.msc_config.yaml or an rclone config (see docs/remote.md)"  # fmt: skip
        raise ConfigError(f"{where}: no profile {profile!r}; profiles there: {sorted(profiles)}{hint}")  # fmt: skip
    try:
        if profile in profiles:
            config = msc.StorageClientConfig.from_dict(merged, profile=profile)
        else:
            config = msc.StorageClientConfig.from_file(profile=profile)
        return msc.StorageClient(config), secrets
    except ImportError as exc:  # the profile's SDK (boto3, azure-storage-blob, ...) is missing
        raise ConfigError(
            f"msc://{profile}/...: the profile's storage provider needs {exc.name or exc}: "
            "install the multi-storage-client extra of its kind (e.g. "
            "'multi-storage-client[boto3]', '[azure-storage-blob]', '[google-cloud-storage]')"
        ) from None
    except Exception as exc:  # a profile MSC refuses (schema, unknown type, ...)
        detail = str(exc)
        for secret in secrets:
            detail = detail.replace(secret, "<redacted>")
        where = " and ".join(files) or "MSC's implicit profiles"
        raise ConfigError(f"{where}: profile {profile!r}: {type(exc).__name__}: {detail}") from None
