"""The loader's declarations match include/rill.h exactly, and the library is found as documented."""

import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rill import _ffi

HEADER = Path(__file__).resolve().parents[3] / "include" / "rill.h"


def header_functions():
    text = HEADER.read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    found = {}
    for ret, name, params in re.findall(r"\n([A-Za-z_][\w \*]*?)\s*\b(rill_\w+)\(([^;{]*?)\);", text):
        if "typedef" in ret:
            continue
        ret = re.sub(r"\s+", " ", ret).strip().replace(" *", "*")
        args = []
        if params.strip() != "void":
            for p in params.split(","):
                p = re.sub(r"\s+", " ", p).strip()
                # Drop the parameter name; keep the type.
                ty = re.sub(r"\s*\b\w+$", "", p).strip().replace(" *", "*")
                args.append(ty)
        found[name] = (ret, args)
    return found


@pytest.mark.skipif(not HEADER.exists(), reason="needs the workspace's include/rill.h")
def test_every_declaration_matches_the_header():
    header = header_functions()
    assert header, "no functions parsed from rill.h"
    assert header == _ffi.FUNCTIONS


def header_structs():
    """Field names, in order, of every `typedef struct { ... } name;` in rill.h."""
    text = HEADER.read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    found = {}
    for body, name in re.findall(r"typedef struct \{(.*?)\}\s*(rill_\w+);", text, flags=re.S):
        fields = []
        for decl in body.split(";"):
            decl = re.sub(r"\s+", " ", decl).strip()
            if not decl:
                continue
            # A function-pointer field is "ret (*name)(...)"; others end in the name.
            m = re.search(r"\(\*\s*(\w+)\)", decl) or re.search(r"(\w+)(\[\w*\])?$", decl)
            fields.append(m.group(1))
        found[name] = fields
    return found


@pytest.mark.skipif(not HEADER.exists(), reason="needs the workspace's include/rill.h")
def test_every_struct_matches_the_header_field_by_field():
    # ctypes lays a Structure out from _fields_: a field missing, extra or out
    # of order here would shift every field after it, silently.
    header = header_structs()
    mirrored = {
        name: [f[0] for f in cls._fields_]
        for name, cls in vars(_ffi).items()
        if isinstance(cls, type) and issubclass(cls, ctypes.Structure) and name.startswith("rill_")
    }
    assert mirrored, "no structures found in rill._ffi"
    for name, fields in mirrored.items():
        assert name in header, f"{name} is not a struct in rill.h"
        assert fields == header[name], name


def test_every_declared_type_is_mapped():
    for name, (ret, params) in _ffi.FUNCTIONS.items():
        for ty in [ret, *params]:
            assert ty in _ffi.TYPES, f"{name}: {ty}"


def test_a_missing_library_is_a_clear_error_listing_where_it_looked(tmp_path):
    code = "import rill"
    env = dict(os.environ, RILL_LIBRARY=str(tmp_path / "nope.so"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "RILL_LIBRARY points to" in r.stderr
    assert "nope.so" in r.stderr


def test_rill_library_wins(tmp_path):
    lib = Path(_ffi.lib._name)
    env = dict(os.environ, RILL_LIBRARY=str(lib))
    r = subprocess.run(
        [sys.executable, "-c", "import rill._ffi as f; print(f.lib._name)"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(lib)


def test_an_installed_package_ships_its_own_copy_of_the_library():
    import rill

    package = Path(rill.__file__).resolve().parent
    if "site-packages" not in str(package) or os.environ.get("RILL_LIBRARY"):
        pytest.skip("running from the source tree or with RILL_LIBRARY set")
    assert Path(_ffi.lib._name).resolve().parent == package
