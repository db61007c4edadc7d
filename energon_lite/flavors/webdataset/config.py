"""The on-disk names of a prepared dataset (Energon's ``flavors.webdataset.config``)."""

from __future__ import annotations

import re

from energon_lite.media_records.table import DB_NAME
from energon_lite.shards.meta import INFO_JSON, INFO_YAML, META_DIR

#: a tar member name split into sample key and extension (``folder/key.ext``)
split_name_re = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
#: member names webdataset treats as metadata, not sample parts (``__x__``)
skip_meta_re = re.compile(r"__[^/]*__($|/)")
MAIN_FOLDER_NAME = META_DIR
INFO_JSON_FILENAME = INFO_JSON
INFO_YAML_FILENAME = INFO_YAML
SPLIT_YAML_FILENAME = "split.yaml"
#: the media metadata index (``prepare-media``), read by ``get_media_metadata``
INDEX_SQLITE_FILENAME = DB_NAME

__all__ = [
    "INDEX_SQLITE_FILENAME",
    "INFO_JSON_FILENAME",
    "INFO_YAML_FILENAME",
    "MAIN_FOLDER_NAME",
    "SPLIT_YAML_FILENAME",
    "skip_meta_re",
    "split_name_re",
]
