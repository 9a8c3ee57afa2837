"""`fastcoord serve --config FILE`: the serve options in a TOML (or JSON) file.

The file holds the same options as the command line, named as the flags without their
dashes (`port = 9092`, `data-dir = "data"` or `data_dir = "data"`), plus a `[topics]`
table (`orders = 12`). It is turned into command-line words placed before the ones the
user typed, so argparse checks every value exactly as it checks a flag, and a flag on
the command line wins over the file (topics from both are declared).
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, List

__all__ = ["config_argv", "ConfigFileError"]


class ConfigFileError(ValueError):
    """The config file cannot be read or holds something that is not a serve option."""



def _toml():
    """The TOML reader: the standard library's from Python 3.11, tomli (the same parser,
    which the server extra installs there) on 3.10."""
    try:
        import tomllib
    except ImportError:
        import tomli as tomllib
    return tomllib

def _read(path: str) -> Dict[str, Any]:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ConfigFileError(f"cannot read config file {path!r}: {exc.strerror}") from None
    try:
        if path.endswith(".json"):
            data = json.loads(raw)
        else:
            data = _toml().loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"config file {path!r} is not valid: {exc}") from None
    except ImportError:
        raise ConfigFileError(f"config file {path!r}: TOML on Python 3.10 needs tomli "
                              "(the server extra installs it), or use a .json file") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"config file {path!r} must hold a table of options")
    return data


def config_argv(path: str, flags: Iterable[str]) -> List[str]:
    """The command-line words equivalent to the options in `path`.

    `flags`: the long option strings the serve parser knows (e.g. "--port"); a key that
    is none of them is an error naming the key, not silently ignored.
    """
    known = set(flags)
    words: List[str] = []
    for key, value in _read(path).items():
        if key == "topics":
            if not isinstance(value, dict):
                raise ConfigFileError(f"{path}: 'topics' must be a table of name = partitions")
            for name, partitions in value.items():
                words += ["--topic", f"{name}:{partitions}"]
            continue
        flag = "--" + str(key).replace("_", "-")
        if flag in ("--config", "--help") or flag not in known:
            raise ConfigFileError(f"{path}: unknown option {key!r}")
        if isinstance(value, bool):
            if value:
                words.append(flag)
            continue
        if isinstance(value, (list, dict)):
            raise ConfigFileError(f"{path}: option {key!r} must be a single value")
        if key in ("data-dir", "data_dir", "sasl-users", "sasl_users", "acls"):
            # Relative paths in the file are relative to the file, as a user expects.
            value = os.path.join(os.path.dirname(os.path.abspath(path)), str(value))
        words += [flag, str(value)]
    return words
