"""One client per store and process: ``s3fs`` for ``s3://``, ``adlfs`` for ``az://``, ``gcsfs``
for ``gs://``, aiohttp for HTTP (fsspec file systems), and for ``msc://`` the
multi-storage-client package's own client behind ``msc_fs.MscFileSystem``.

Clients are opened lazily and held by the process's storage session (``session.py``), so a
DataLoader worker forked from a process that already held one opens its own (a client's
connection pool and event loop must never be shared across ``fork``). Retries are ours (``retry.py``): botocore's and s3fs's own
retry loops are set to a single attempt so every retry is counted and backed off in one place.

Endpoint and credentials, for ``s3://``: ``storage_options`` given with the path (s3fs's
arguments: ``endpoint_url``, ``key``, ``secret``, ``token``, ``profile``, ``region_name``,
``anon``), else the standard AWS environment (``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``,
``AWS_DEFAULT_REGION``, ``~/.aws/config``) read by botocore. ``msc://`` takes everything from
its MSC profile (``msc.py``); ``storage_options`` are refused there, naming the profile.

For ``az://container/prefix`` (Azure Blob, through adlfs): ``storage_options`` (adlfs's
arguments: ``account_name``, ``account_key``, ``connection_string``, ``sas_token``,
``credential``, ``anon``...), else Azure's standard variables ``AZURE_STORAGE_CONNECTION_STRING``,
``AZURE_STORAGE_ACCOUNT_NAME`` with ``AZURE_STORAGE_ACCOUNT_KEY`` or ``AZURE_STORAGE_SAS_TOKEN``
(or ``AZURE_STORAGE_CLIENT_ID``/``_SECRET``/``TENANT_ID``, else Azure's default credential
chain). The Azure SDK's own retry policy is set to no retries: ours counts them.

For ``gs://bucket/prefix`` (Google Cloud Storage, through gcsfs's JSON-API client):
``storage_options`` (gcsfs's ``project``, ``token``, ``endpoint_url``...), else Google's
standard environment: ``GOOGLE_APPLICATION_CREDENTIALS`` (or the metadata server / gcloud's
default login) for the token, ``GOOGLE_CLOUD_PROJECT`` for the project, and
``STORAGE_EMULATOR_HOST`` for an emulator (anonymous access).
"""

from __future__ import annotations

import importlib
import os
import types
from dataclasses import dataclass
from typing import Any

from energon_lite.errors import ConfigError
from energon_lite.storage.msc import open_client
from energon_lite.storage.msc_fs import MscFileSystem
from energon_lite.storage.path import RemotePath
from energon_lite.storage.session import session

DEFAULT_TIMEOUT = 30.0  # seconds per request (connect and read)


# seconds one request may take in all (connect, headers, body): every ranged GET, and every
# HTTP request; S3 listings and metadata reads have botocore's per-read timeout only
REQUEST_TIMEOUT = 60.0


def request_timeout() -> float:
    """``ENERGON_LITE_REQUEST_TIMEOUT`` seconds, else ``REQUEST_TIMEOUT``."""
    value = os.environ.get("ENERGON_LITE_REQUEST_TIMEOUT")
    try:
        seconds = float(value) if value else REQUEST_TIMEOUT
    except ValueError:
        raise ConfigError(f"ENERGON_LITE_REQUEST_TIMEOUT={value!r}: a number of seconds") from None
    if not seconds > 0:
        raise ConfigError(f"ENERGON_LITE_REQUEST_TIMEOUT={value!r}: must be > 0 seconds")
    return seconds


_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION", "MSC_CONFIG",
        "ENERGON_LITE_REQUEST_TIMEOUT", "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_CLIENT_ID", "AZURE_STORAGE_CLIENT_SECRET", "AZURE_STORAGE_TENANT_ID",
        "AZURE_STORAGE_ANON", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT",
        "STORAGE_EMULATOR_HOST")  # fmt: skip
# the secrets among them, scrubbed from every message
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID",
               "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN",
               "AZURE_STORAGE_CLIENT_SECRET")  # fmt: skip
STORAGE_ENV = _ENV  # the variables that say where a store is and how to reach it


@dataclass(frozen=True)
class Target:
    """A client and the path to hand it for one RemotePath."""

    fs: Any  # an fsspec AbstractFileSystem, or an MscFileSystem (the same calls)
    path: str  # "bucket/key" for S3, the URL for HTTP, "/key" within an MSC profile
    secrets: tuple[str, ...]  # values to scrub from any message


def _freeze(options: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted((k, repr(v)) for k, v in options.items()))


def _need(module: str, extra: str = "s3") -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"{extra_scheme(extra)} paths need {module}: pip install 'energon-lite[{extra}]'"
        ) from None


def extra_scheme(extra: str) -> str:
    return {"s3": "remote", "azure": "az://", "gcs": "gs://"}.get(extra, extra)


def _s3_client(options: dict[str, Any]) -> Any:
    s3fs = _need("s3fs")

    options = dict(options)
    timeout = float(options.pop("timeout", DEFAULT_TIMEOUT))
    region = options.pop("region_name", None) or os.environ.get("AWS_DEFAULT_REGION")
    client_kwargs = dict(options.pop("client_kwargs", {}) or {})
    if region:
        client_kwargs.setdefault("region_name", region)
    endpoint = options.pop("endpoint_url", None) or os.environ.get(
        "AWS_ENDPOINT_URL_S3", os.environ.get("AWS_ENDPOINT_URL")
    )
    config_kwargs: dict[str, Any] = {
        "retries": {"total_max_attempts": 1, "mode": "standard"},
        "connect_timeout": timeout,
        "read_timeout": timeout,
    }
    if "AWS_REQUEST_CHECKSUM_CALCULATION" not in os.environ:
        # a PUT body as sent, not aws-chunked with a checksum trailer (botocore >= 1.36's
        # default), which S3-compatible stores other than AWS (MinIO, Ceph, test servers)
        # may reject or leave hanging; checksums are still sent where an operation needs one
        config_kwargs["request_checksum_calculation"] = "when_required"
    config_kwargs.update(options.pop("config_kwargs", {}) or {})
    fs = s3fs.S3FileSystem(
        endpoint_url=endpoint,
        client_kwargs=client_kwargs,
        config_kwargs=config_kwargs,
        skip_instance_cache=True,
        **options,
    )
    fs.retries = 1  # s3fs's own retry loop: one attempt, ours counts and backs off
    _no_expect_continue(fs)
    return fs


def _no_expect_continue(fs: Any) -> None:
    """Send uploads without ``Expect: 100-continue``: botocore asks for it on every upload,
    and aiohttp then waits for the server's interim answer, which simple S3-compatible
    servers never send (the upload would hang until the read timeout, then again on each
    retry). Our uploads are in memory and small enough to send at once."""
    from botocore.handlers import add_expect_header

    fs.connect()  # makes the client (no request)
    fs.s3.meta.events.unregister("before-call.s3", add_expect_header)


def _az_client(options: dict[str, Any]) -> Any:
    adlfs = _need("adlfs", "azure")

    options = dict(options)
    timeout = float(options.pop("timeout", DEFAULT_TIMEOUT))
    options.setdefault("connection_timeout", int(timeout))
    options.setdefault("read_timeout", int(timeout))
    fs = adlfs.AzureBlobFileSystem(skip_instance_cache=True, use_listings_cache=False, **options)
    # the SDK's retry policy (up to 3 retries, 15 s apart) shares one object with every
    # container and blob client made from this service client: no retries there, ours count
    policy = getattr(getattr(fs.service_client, "_config", None), "retry_policy", None)
    if policy is not None and hasattr(policy, "total_retries"):
        policy.total_retries = 0
    return fs


def _gs_client(options: dict[str, Any]) -> Any:
    # gcsfs.core's client: the JSON API only (the package's default class probes each bucket
    # over gRPC first, which an emulator does not answer)
    core = _need("gcsfs.core", "gcs")

    options = dict(options)
    timeout = float(options.pop("timeout", DEFAULT_TIMEOUT))
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator and "token" not in options:
        options["token"] = "anon"  # an emulator checks no credentials
    if "project" not in options and os.environ.get("GOOGLE_CLOUD_PROJECT"):
        options["project"] = os.environ["GOOGLE_CLOUD_PROJECT"]
    fs = core.GCSFileSystem(
        skip_instance_cache=True,
        use_listings_cache=False,
        requests_timeout=timeout,
        **options,
    )
    # gcsfs retries each request up to 6 times (sleeping up to 32 s): one attempt, ours count
    single = getattr(type(fs)._request, "__wrapped__", None)
    if single is not None:
        fs._request = types.MethodType(single, fs)
    return fs


def _http_client(options: dict[str, Any]) -> Any:
    aiohttp = _need("aiohttp")
    HTTPFileSystem = _need("fsspec.implementations.http").HTTPFileSystem

    options = dict(options)
    timeout = float(options.pop("timeout", DEFAULT_TIMEOUT))
    client_kwargs = {
        # total: a server trickling bytes never stalls a request past it (each socket read
        # alone would wait at most ``timeout``, and a trickle never lets it)
        "timeout": aiohttp.ClientTimeout(
            total=request_timeout(), connect=timeout, sock_read=timeout
        ),
        **(options.pop("client_kwargs", {}) or {}),
    }
    return HTTPFileSystem(skip_instance_cache=True, client_kwargs=client_kwargs, **options)


def _secrets(options: dict[str, Any]) -> tuple[str, ...]:
    names = ("key", "secret", "token", "password", "account_key", "sas_token", "client_secret")
    values = [options.get(k) for k in names]
    values += [os.environ.get(k) for k in _SECRET_ENV]
    for text in (options.get("connection_string"), os.environ.get("AZURE_STORAGE_CONNECTION_STRING")):  # fmt: skip
        if isinstance(text, str):  # AccountKey=...;SharedAccessSignature=...
            values += [part.partition("=")[2] for part in text.split(";") if "Key=" in part
                       or part.startswith("SharedAccessSignature=")]  # fmt: skip
    headers = options.get("headers") or {}
    values += [str(v) for v in headers.values()]
    return tuple(v for v in values if isinstance(v, str) and len(v) >= 4)


def target(path: RemotePath) -> Target:
    """The client for ``path`` in this process (opened on first use after a fork)."""
    held = session()
    options = dict(path.storage_options)
    if path.scheme == "msc":
        return _msc_target(path)
    elif path.scheme in ("s3", "az", "gs"):
        where, scheme = f"{path.netloc}/{path.key}".rstrip("/"), path.scheme
    else:
        where, scheme = path.url, "http"
    env = tuple(os.environ.get(k) for k in _ENV)  # a changed environment gets a new client
    key = (scheme, _freeze(options), env)
    fs = held.clients.get(key)
    if fs is None:
        fs = held.clients[key] = _OPEN[scheme](options)
    return Target(fs, where, _secrets(options))


def _msc_target(path: RemotePath) -> Target:
    """The MSC client of ``path``'s profile, opened once per configuration (``MSC_CONFIG``,
    or the folders MSC's and rclone's files are found in) and process."""
    if path.storage_options:
        raise ConfigError(
            f"{path}: msc:// paths take their endpoint and credentials from the MSC profile "
            f"{path.netloc!r}; storage_options {sorted(path.storage_options)} are not read there"
        )
    config_env = tuple(os.environ.get(k, "") for k in ("MSC_CONFIG", "XDG_CONFIG_HOME", "HOME"))
    key = ("msc", path.netloc, config_env, tuple(os.environ.get(k) for k in _ENV))
    held = session()
    opened = held.clients.get(key)
    if opened is None:
        client, secrets = open_client(path.netloc)
        opened = held.clients[key] = (MscFileSystem(client), secrets)
    fs, secrets = opened
    return Target(fs, "/" + path.key, (*secrets, *_secrets({})))


_OPEN = {"s3": _s3_client, "az": _az_client, "gs": _gs_client, "http": _http_client}
