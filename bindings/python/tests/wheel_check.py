"""Builds the wheel the way a new user would and checks it (a CI step).

    python3 bindings/python/tests/wheel_check.py [WORKDIR]

From a fresh clone of the repository's committed HEAD, with nothing built:
``pip wheel ./bindings/python`` in a new venv must build librill itself and
give a wheel of the distribution ``rill-pubsub`` tagged py3-none-<platform>,
where on Linux the platform is ``manylinux_<X>_<Y>_<arch>`` with glibc X.Y
the newest ``GLIBC_`` version the library references (PEP 600, what a
package index accepts); the wheel holds the package and the library, the
library without debug sections and (on x86-64) with the TLS descriptors the
workspace's cargo config asks for, the licence files at the repository's
root in its .dist-info, and no absolute path of the machine it was built on;
installed into the venv, a script run from elsewhere (RILL_LIBRARY unset)
must publish and receive with the library inside the package.

Then the sdist: ``python -m build --sdist`` of the clone must carry the
build hooks and the Rust workspace (under ``rust/``); unpacked into an empty
directory, away from the clone, ``pip wheel`` of it must give a wheel that
passes the same checks. Both builds share one cargo target directory
(``CARGO_TARGET_DIR``), so the second compiles only rill's own crates.
Exits non-zero with the reasons otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# The distribution's name on the package index (the import name is rill),
# and as it begins the wheel's and the sdist's file names.
DISTRIBUTION = "rill-pubsub"
NORMALIZED = "rill_pubsub"
# What the sdist must carry for build_hooks.py to run cargo.
SDIST_NEEDS = {
    "build_hooks.py",
    "pyproject.toml",
    "rill/__init__.py",
    "rust/Cargo.toml",
    "rust/Cargo.lock",
    "rust/.cargo/config.toml",
    "rust/src/lib.rs",
    "rust/ffi/Cargo.toml",
    "rust/ffi/build.rs",
    "rust/nats/Cargo.toml",
}
# A glibc symbol version as the library's dynamic string table names it.
GLIBC_VERSION = re.compile(rb"GLIBC_2\.(\d+)")
EXPECTED = {
    "rill/__init__.py",
    "rill/_broker.py",
    "rill/_errors.py",
    "rill/_ffi.py",
    "rill/aio.py",
    "rill/nats.py",
    "rill/py.typed",
    "rill/librill.so",
}
SCRIPT = """
import os, rill
assert "RILL_LIBRARY" not in os.environ
with rill.Broker() as b:
    b.create_topic("t")
    got = []
    with b.subscribe("t", lambda m: got.append(m.payload), start="earliest") as sub:
        b.publish("t", b"hello")
        assert sub.wait_idle(20), "not delivered"
    with b.consumer("g", "t") as c:
        assert [m.payload for m in c.poll(timeout=20)] == [b"hello"]
assert got == [b"hello"], got
print(rill._ffi.lib._name)
"""


def sections(elf: bytes) -> dict[str, bytes]:
    """The sections of a 64-bit little-endian ELF file, by name: their bytes."""
    shoff = int.from_bytes(elf[0x28:0x30], "little")
    shentsize = int.from_bytes(elf[0x3A:0x3C], "little")
    shnum = int.from_bytes(elf[0x3C:0x3E], "little")
    shstrndx = int.from_bytes(elf[0x3E:0x40], "little")

    def header(i: int) -> bytes:
        return elf[shoff + i * shentsize : shoff + (i + 1) * shentsize]

    strtab = int.from_bytes(header(shstrndx)[0x18:0x20], "little")  # sh_offset
    found = {}
    for i in range(shnum):
        h = header(i)
        at = strtab + int.from_bytes(h[0:4], "little")  # sh_name
        offset, size = int.from_bytes(h[0x18:0x20], "little"), int.from_bytes(h[0x20:0x28], "little")
        found[elf[at : elf.index(b"\0", at)].decode()] = elf[offset : offset + size]
    return found


# ELF's x86-64 relocation type of a TLS descriptor (R_X86_64_TLSDESC).
R_X86_64_TLSDESC = 36
# ELF's machine number of x86-64 (EM_X86_64).
EM_X86_64 = 62


def tls_descriptors(elf: bytes, found: dict[str, bytes]) -> int | None:
    """How many dynamic relocations of an x86-64 library are TLS descriptors
    (None for another machine). The workspace's .cargo/config.toml asks for
    them; a build that lost its flags has none."""
    if int.from_bytes(elf[0x12:0x14], "little") != EM_X86_64:
        return None
    rela = found.get(".rela.dyn", b"")
    # Elf64_Rela: r_offset, r_info (type in its low 32 bits), r_addend.
    return sum(
        int.from_bytes(rela[at + 8 : at + 12], "little") == R_X86_64_TLSDESC for at in range(0, len(rela) - 23, 24)
    )


def expected_platform(lib: bytes, found: dict[str, bytes]) -> str:
    """The platform tag the library needs: on Linux manylinux_2_<Y>_<arch>
    with 2.Y the newest glibc version in its dynamic string table (the names
    of the symbol versions it needs), else this platform's own tag."""
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    glibc = [int(m) for m in GLIBC_VERSION.findall(found.get(".dynstr", b""))]
    if not platform.startswith("linux_") or not glibc:
        return platform
    return f"manylinux_2_{max(glibc)}_{platform[len('linux_') :]}"


def check_wheel(wheel: Path, forbidden: set[str], licenses: list[Path]) -> list[str]:
    """The wheel's tag, contents, licence, library and absence of paths."""
    errors: list[str] = []
    if not wheel.name.startswith(f"{NORMALIZED}-"):
        errors.append(f"{wheel.name} is not a wheel of {DISTRIBUTION}")
    with zipfile.ZipFile(wheel) as z:
        names = {n for n in z.namelist() if not n.startswith(f"{NORMALIZED}-")}
        if names != EXPECTED:
            errors.append(f"wheel contents: missing {sorted(EXPECTED - names)}, unexpected {sorted(names - EXPECTED)}")
        for name in z.namelist():
            data = z.read(name)
            for path in forbidden:
                if path.encode() in data:
                    errors.append(f"{name} contains the absolute path {path}")
        metadata = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), "")
        headers = (z.read(metadata).decode() if metadata else "").split("\n\n", 1)[0].splitlines()
        if f"Name: {DISTRIBUTION}" not in headers:
            errors.append(f"the wheel's METADATA does not name the distribution {DISTRIBUTION}")
        for license_file in licenses:
            inside = f"{metadata.rsplit('/', 1)[0]}/licenses/{license_file.name}"
            if inside not in z.namelist() or z.read(inside) != license_file.read_bytes():
                errors.append(f"the wheel does not carry {license_file.name} as {inside}")
            if f"License-File: {license_file.name}" not in headers:
                errors.append(f"the wheel's METADATA does not name {license_file.name} in a License-File header")
        lib = z.read("rill/librill.so") if "rill/librill.so" in names else b""
    if not lib.startswith(b"\x7fELF\x02\x01"):
        errors.append("librill.so in the wheel is not a 64-bit little-endian ELF library")
        return errors
    found = sections(lib)
    debug = [n for n in found if n.startswith(".debug")]
    if debug:
        errors.append(f"librill.so in the wheel still has debug sections: {debug}")
    if tls_descriptors(lib, found) == 0:
        errors.append("librill.so in the wheel reaches its thread-locals without TLS descriptors")
    platform = expected_platform(lib, found)
    if not wheel.name.endswith(f"-py3-none-{platform}.whl"):
        errors.append(f"{wheel.name} is not tagged py3-none-{platform}, the glibc its library needs")
    return errors


def install_and_run(py: Path, wheel: Path, work: Path, env: dict[str, str]) -> list[str]:
    pip = [str(py), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--force-reinstall", "--no-deps", str(wheel)], check=True, env=env)
    run = subprocess.run([str(py), "-c", SCRIPT], cwd=work, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        return [f"{wheel.name}: the installed package failed:\n{run.stderr}"]
    if "site-packages/rill/librill.so" not in run.stdout:
        return [f"{wheel.name}: the library was loaded from {run.stdout.strip()}, not from the package"]
    return []


def one_wheel(directory: Path) -> Path | None:
    built = list(directory.glob("*.whl"))
    return built[0] if len(built) == 1 else None


def main(work: Path) -> list[str]:
    errors: list[str] = []
    clone, venv, wheels = work / "clone", work / "venv", work / "wheels"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    assert not (clone / "target").exists(), "a fresh clone has nothing built"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    pip = [str(py), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "build"], check=True)
    env = {k: v for k, v in os.environ.items() if k != "RILL_LIBRARY"}
    # One target directory for both builds: the second reuses the first's
    # dependencies. Its path is remapped in the library like the others.
    env["CARGO_TARGET_DIR"] = str(work / "cargo-target")
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(wheels), str(clone / "bindings" / "python")], check=True, env=env
    )

    wheel = one_wheel(wheels)
    if wheel is None:
        return [f"expected one wheel, found {list(wheels.glob('*'))}"]
    forbidden = {str(p) for p in (clone, REPO, work, Path.home()) if str(p) not in ("/", "")}
    cargo_home = os.environ.get("CARGO_HOME")
    if cargo_home:
        forbidden.add(cargo_home)
    licenses = sorted(p for p in clone.iterdir() if p.is_file() and p.name.upper().startswith("LICENSE"))
    errors += check_wheel(wheel, forbidden, licenses)
    errors += install_and_run(py, wheel, work, env)

    # The sdist, built from the clone, then a wheel from it alone.
    sdists, unpacked, sdist_wheels = work / "sdist", work / "unpacked", work / "sdist-wheels"
    made = subprocess.run(
        [str(py), "-m", "build", "--sdist", "--outdir", str(sdists), str(clone / "bindings" / "python")],
        env=env,
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        return [*errors, f"python -m build --sdist failed:\n{made.stdout}{made.stderr}"]
    [sdist] = sdists.glob("*.tar.gz")
    if not sdist.name.startswith(f"{NORMALIZED}-"):
        errors.append(f"{sdist.name} is not an sdist of {DISTRIBUTION}")
    with tarfile.open(sdist) as tar:
        members = tar.getnames()
        root = members[0].split("/", 1)[0]
        inside = {m.split("/", 1)[1] for m in members if "/" in m}
        missing = sorted(SDIST_NEEDS - inside)
        if missing:
            errors.append(f"the sdist lacks {missing}")
        stray = sorted(m for m in inside if m.endswith(".so") or m.startswith(("rust/target/", "rust/bindings/")))
        if stray:
            errors.append(f"the sdist carries build output or the bindings: {stray[:5]}")
        unpacked.mkdir()
        tar.extractall(unpacked, filter="data")
    source = unpacked / root
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(sdist_wheels), str(source)], check=True, env=env, cwd=unpacked
    )
    wheel = one_wheel(sdist_wheels)
    if wheel is None:
        return [*errors, f"expected one wheel from the sdist, found {list(sdist_wheels.glob('*'))}"]
    errors += [f"from the sdist: {e}" for e in check_wheel(wheel, forbidden | {str(unpacked)}, licenses)]
    errors += install_and_run(py, wheel, work, env)
    return errors


if __name__ == "__main__":
    if len(sys.argv) > 1:
        work = Path(sys.argv[1]).resolve()
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="rill-wheel-"))
    problems = main(work)
    for p in problems:
        print("wheel check:", p, file=sys.stderr)
    if not problems:
        print(f"wheel check: ok ({next((work / 'wheels').glob('*.whl')).name} and the sdist's)")
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if problems else 0)
