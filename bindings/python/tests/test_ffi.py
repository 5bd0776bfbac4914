"""The loader's declarations match include/rill.h exactly, and the library is
found as documented.

ctypes trusts whatever it is told: a field missing, reordered or of the wrong
width shifts every field after it, a wrong #define value sends the wrong
option, and a status the binding does not know becomes a bare RillError.
So every struct is compared with the header field by field with its C type
(and, where a C compiler is at hand, offset by offset and size by size
against the compiler's own layout), every function with its C signature,
every function-pointer typedef with its CFUNCTYPE, every #define with its
value, and every status with its value, its name in the library and its
exception.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import rill
from rill import _errors, _ffi

HEADER = Path(__file__).resolve().parents[3] / "include" / "rill.h"
# The NATS bridge's header: its declarations are mirrored in _ffi too (NATS_FUNCTIONS).
NATS_HEADER = HEADER.with_name("rill_nats.h")
needs_header = pytest.mark.skipif(not HEADER.exists(), reason="needs the workspace's include/rill.h")


def header_text() -> str:
    text = HEADER.read_text() + "\n" + NATS_HEADER.read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def normalise(ty: str) -> str:
    """A C type spelled one way: single spaces, '*' attached to the type."""
    ty = re.sub(r"\s+", " ", ty).strip()
    return re.sub(r"\s*\*", "*", ty)


def split_decl(decl: str) -> tuple[str, str]:
    """'const char *name' -> ('const char*', 'name')."""
    decl = re.sub(r"\s+", " ", decl).strip()
    m = re.fullmatch(r"(.*?[\s\*])(\w+)", decl)
    assert m, decl
    return normalise(m.group(1)), m.group(2)


def header_functions() -> dict[str, tuple[str, list[str]]]:
    found: dict[str, tuple[str, list[str]]] = {}
    for ret, name, params in re.findall(r"\n([A-Za-z_][\w \*]*?)\s*\b(rill_\w+)\(([^;{]*?)\);", header_text()):
        if "typedef" in ret:
            continue
        args = [] if params.strip() == "void" else [split_decl(p)[0] for p in params.split(",")]
        found[name] = (normalise(ret), args)
    return found


def header_callbacks() -> dict[str, tuple[str, list[str]]]:
    """Every `typedef RET (*name)(PARAMS);`."""
    found: dict[str, tuple[str, list[str]]] = {}
    for ret, name, params in re.findall(r"typedef\s+([\w \*]+?)\s*\(\*\s*(\w+)\)\s*\(([^;]*?)\);", header_text()):
        found[name] = (normalise(ret), [split_decl(p)[0] for p in params.split(",")])
    return found


def header_aliases() -> dict[str, str]:
    """Every `typedef SCALAR name;` (the int32_t "enum" types)."""
    return {
        name: normalise(ty) for ty, name in re.findall(r"typedef\s+(u?int\d+_t|size_t|bool)\s+(\w+);", header_text())
    }


def header_structs() -> dict[str, list[tuple[str, str]]]:
    """(field name, C type) in order, of every `typedef struct { ... } name;`."""
    found: dict[str, list[tuple[str, str]]] = {}
    for body, name in re.findall(r"typedef struct \{(.*?)\}\s*(rill_\w+);", header_text(), flags=re.S):
        fields = []
        for decl in body.split(";"):
            if decl.strip():
                ty, field = split_decl(decl)
                fields.append((field, ty))
        found[name] = fields
    return found


def header_defines() -> dict[str, object]:
    """Every `#define RILL_X value` with an integer or string value."""
    found: dict[str, object] = {}
    for name, value in re.findall(r"^#define (RILL_\w+)[ \t]+(.+?)\s*$", header_text(), flags=re.M):
        if re.fullmatch(r"-?\d+", value):
            found[name] = int(value)
        elif re.fullmatch(r'"[^"\\]*"', value):
            found[name] = value[1:-1]
        else:
            raise AssertionError(f"#define {name} {value}: teach this test its kind of value")
    return found


def header_statuses() -> dict[str, int]:
    m = re.search(r"typedef enum \{(.*?)\}\s*rill_status;", header_text(), flags=re.S)
    assert m, "no rill_status enum in rill.h"
    return {name: int(v) for name, v in re.findall(r"(RILL_\w+)\s*=\s*(\d+)", m.group(1))}


# C scalar types and the ctypes types that mirror them.
SCALARS: dict[str, Any] = {
    "bool": ctypes.c_bool,
    "int32_t": ctypes.c_int32,
    "int64_t": ctypes.c_int64,
    "uint32_t": ctypes.c_uint32,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "double": ctypes.c_double,
    "int": ctypes.c_int,
    "rill_status": ctypes.c_int,  # a C enum: an int
}


def ctype_matches(c_type: str, py_type: Any) -> bool:
    """Whether a ctypes field/argument type is a faithful mirror of a C type."""
    c_type = header_aliases().get(c_type, c_type)
    if c_type in SCALARS:
        return bool(py_type is SCALARS[c_type])
    callbacks = header_callbacks()
    if c_type in callbacks:
        ret, params = callbacks[c_type]
        restype = getattr(py_type, "_restype_", "missing")
        argtypes = getattr(py_type, "_argtypes_", None)
        return (
            argtypes is not None
            and (restype is None if ret == "void" else restype is not None and ctype_matches(ret, restype))
            and len(argtypes) == len(params)
            and all(ctype_matches(c, p) for c, p in zip(params, argtypes))
        )
    if c_type.endswith("*"):
        pointee = c_type[:-1].replace("const ", "").strip()
        if py_type is ctypes.c_void_p:
            return True  # an untyped pointer holds any pointer of the same width
        if pointee == "char" and py_type is ctypes.c_char_p:
            return True
        target = getattr(py_type, "_type_", None)
        if isinstance(target, type) and issubclass(py_type, ctypes._Pointer):
            if pointee in SCALARS or pointee in header_aliases():
                return ctype_matches(pointee, target)
            return target.__name__ == pointee or ctype_matches(pointee, target)
        return False
    return False


def mirrored_structs() -> dict[str, Any]:
    return {
        name: cls
        for name, cls in vars(_ffi).items()
        if isinstance(cls, type) and issubclass(cls, ctypes.Structure) and name.startswith("rill_")
    }


@needs_header
def test_every_declaration_matches_the_header() -> None:
    header = header_functions()
    assert header, "no functions parsed from rill.h"
    assert header == {**_ffi.FUNCTIONS, **_ffi.NATS_FUNCTIONS}


@needs_header
def test_every_declared_type_is_mirrored_faithfully() -> None:
    declared = {**_ffi.FUNCTIONS, **(_ffi.NATS_FUNCTIONS if _ffi.HAS_NATS else {})}
    for name, (ret, params) in declared.items():
        fn = getattr(_ffi.lib, name)
        if ret == "void":
            assert fn.restype is None, name
        else:
            assert ctype_matches(ret, fn.restype), f"{name} returns {ret}, declared {fn.restype}"
        assert len(fn.argtypes) == len(params), name
        for k, (c, py) in enumerate(zip(params, fn.argtypes)):
            assert ctype_matches(c, py), f"{name} argument {k}: {c} declared as {py}"


@needs_header
def test_every_struct_matches_the_header_field_by_field_with_types() -> None:
    header = header_structs()
    mirrored = mirrored_structs()
    assert mirrored, "no structures found in rill._ffi"
    assert set(mirrored) == set(header), "structs missing on one side"
    for name, cls in mirrored.items():
        names = [f[0] for f in cls._fields_]
        assert names == [f for f, _ in header[name]], name
        for (field, py), (_, c) in zip([(f[0], f[1]) for f in cls._fields_], header[name]):
            assert ctype_matches(c, py), f"{name}.{field}: {c} mirrored as {py}"


@needs_header
def test_every_callback_typedef_matches_its_cfunctype() -> None:
    callbacks = header_callbacks()
    mirrors = {
        "rill_handler": _ffi.HANDLER,
        "rill_batch_handler": _ffi.BATCH_HANDLER,
        "rill_destructor": _ffi.DESTRUCTOR,
        "rill_lag_callback": _ffi.LAG_CALLBACK,
        "rill_topic_callback": _ffi.TOPIC_CALLBACK,
        "rill_log_callback": _ffi.LOG_CALLBACK,
        "rill_dead_letter_callback": _ffi.DEAD_LETTER_CALLBACK,
        "rill_subscription_callback": _ffi.SUBSCRIPTION_CALLBACK,
        "rill_group_callback": _ffi.GROUP_CALLBACK,
        "rill_partition_lag_callback": _ffi.PARTITION_LAG_CALLBACK,
        "rill_named_subscription_callback": _ffi.NAMED_SUBSCRIPTION_CALLBACK,
        "rill_group_member_callback": _ffi.GROUP_MEMBER_CALLBACK,
        "rill_directory_subscription_callback": _ffi.DIRECTORY_SUBSCRIPTION_CALLBACK,
        "rill_directory_consumer_callback": _ffi.DIRECTORY_CONSUMER_CALLBACK,
        "rill_validator_fn": _ffi.VALIDATOR,
    }
    assert set(callbacks) == set(mirrors)
    for name, cfunc in mirrors.items():
        assert ctype_matches(name, cfunc), name


@needs_header
@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_struct_layouts_match_the_c_compiler(tmp_path: Path) -> None:
    # The compiler's own offsets and sizes, so padding and widths are checked
    # as C lays them out, not as this test believes they are.
    lines = ["#include <stdio.h>", "#include <stddef.h>", f'#include "{NATS_HEADER}"', "int main(void) {"]
    for name, fields in header_structs().items():
        lines.append(f'printf("{name} %zu %zu\\n", sizeof({name}), _Alignof({name}));')
        for field, _ in fields:
            lines.append(
                f'printf("{name}.{field} %zu %zu\\n", offsetof({name}, {field}), sizeof((({name}*)0)->{field}));'
            )
    lines += ["return 0;", "}"]
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text("\n".join(lines))
    subprocess.run(["cc", "-std=c11", "-o", str(exe), str(src)], check=True)
    compiled = dict(
        (key, (int(a), int(b)))
        for key, a, b in (
            line.split() for line in subprocess.run([str(exe)], capture_output=True, text=True).stdout.splitlines()
        )
    )
    for name, cls in mirrored_structs().items():
        assert compiled[name] == (ctypes.sizeof(cls), ctypes.alignment(cls)), name
        for field, _ in cls._fields_:
            desc = getattr(cls, field)
            assert compiled[f"{name}.{field}"] == (desc.offset, desc.size), f"{name}.{field}"


@needs_header
def test_every_define_has_its_value() -> None:
    defines = header_defines()
    assert len(defines) >= 15, defines
    for name, value in defines.items():
        assert getattr(_ffi, name, None) == value, (
            f"#define {name} {value!r}: rill._ffi has {getattr(_ffi, name, None)!r}"
        )
    # And no stale constant lingers on the Python side.
    mirrored = {n for n in vars(_ffi) if re.fullmatch(r"RILL_[A-Z_]+", n) and n not in _ffi.STATUS}
    assert mirrored <= set(defines), mirrored - set(defines)


# Statuses whose exception is not named after the status.
NAMED_OTHERWISE = {
    "RILL_ERR_NULL_ARGUMENT": "InvalidArgument",
    "RILL_ERR_IO": "StorageError",
    # Issue 42 names it.
    "RILL_ERR_SCHEMA": "SchemaError",
    "RILL_ERR_CORRUPT": "CorruptData",
}


@needs_header
def test_every_status_has_its_value_name_and_exception() -> None:
    statuses = header_statuses()
    assert statuses["RILL_OK"] == 0 and len(statuses) >= 16
    for name, value in statuses.items():
        assert _ffi.STATUS.get(name) == value, name
        assert _ffi.status_name(value) == name, f"the library names {value} {_ffi.status_name(value)}"
        if value == 0:
            continue
        exc = _errors._BY_STATUS.get(value)
        assert exc is not None and issubclass(exc, rill.RillError), name
        # RILL_ERR_TOPIC_EXISTS -> TopicExists, except where the name is fixed
        # otherwise (NULL_ARGUMENT, a binding bug, is InvalidArgument; the
        # storage errors have the names issue 11 gives them).
        expected = "".join(w.capitalize() for w in name[len("RILL_ERR_") :].split("_"))
        expected = NAMED_OTHERWISE.get(name, expected)
        assert exc.__name__ == expected, name
        assert getattr(rill, exc.__name__) is exc


def test_storage_errors_are_os_errors_and_corrupt_data_is_not() -> None:
    assert issubclass(rill.StorageError, OSError)
    assert issubclass(rill.StorageError, rill.RillError)
    assert not issubclass(rill.CorruptData, OSError)
    assert _errors._BY_STATUS[_ffi.STATUS["RILL_ERR_CORRUPT"]] is rill.CorruptData


def test_resource_exhausted_is_a_memory_error() -> None:
    assert issubclass(rill.ResourceExhausted, MemoryError)
    assert issubclass(rill.ResourceExhausted, rill.RillError)
    assert _errors._BY_STATUS[_ffi.STATUS["RILL_ERR_RESOURCE_EXHAUSTED"]] is rill.ResourceExhausted


def test_every_declared_type_is_mapped() -> None:
    for name, (ret, params) in {**_ffi.FUNCTIONS, **_ffi.NATS_FUNCTIONS}.items():
        for ty in [ret, *params]:
            assert ty in _ffi.TYPES, f"{name}: {ty}"


def test_a_missing_library_is_a_clear_error_listing_where_it_looked(tmp_path: Path) -> None:
    code = "import rill"
    env = dict(os.environ, RILL_LIBRARY=str(tmp_path / "nope.so"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "RILL_LIBRARY points to" in r.stderr and "nope.so" in r.stderr


def test_rill_library_wins(tmp_path: Path) -> None:
    lib = Path(tmp_path / "librill-copy.so")
    shutil.copyfile(_ffi.lib._name, lib)
    env = dict(os.environ, RILL_LIBRARY=str(lib))
    r = subprocess.run(
        [sys.executable, "-c", "import rill._ffi as f; print(f.lib._name)"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(lib)


def test_an_installed_package_ships_its_own_copy_of_the_library() -> None:
    package = Path(rill.__file__).resolve().parent
    if "site-packages" not in str(package) or os.environ.get("RILL_LIBRARY"):
        pytest.skip("running from the source tree or with RILL_LIBRARY set")
    assert Path(_ffi.lib._name).resolve().parent == package
    assert not (package / "_workspace.py").exists(), "no build-machine path may be recorded"
