"""Builds the wheel the way a new user would and checks it (a CI step).

    python3 bindings/python/tests/wheel_check.py [WORKDIR]

From a fresh clone of the repository's committed HEAD, with nothing built:
``pip wheel ./bindings/python`` in a new venv must build librill itself and
give a platform-tagged wheel (py3-none-<platform>) that holds the package,
the library and the licence texts, the library without debug sections and (on x86-64) with
the TLS descriptors the workspace's cargo config asks for, and no absolute path
of the machine it was built on; installed into the venv, a script run from
elsewhere (RILL_LIBRARY unset) must publish and receive with the library
inside the package. Exits non-zero with the reasons otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
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
# The licence texts, wherever in the .dist-info the wheel's metadata version
# puts them (licenses/ from metadata 2.4 on, the top of it before).
LICENCES = ("LICENSE-MIT", "LICENSE-APACHE")
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


def main(work: Path) -> list[str]:
    errors: list[str] = []
    clone, venv, wheels = work / "clone", work / "venv", work / "wheels"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    assert not (clone / "target").exists(), "a fresh clone has nothing built"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    pip = [str(py), "-m", "pip", "--disable-pip-version-check", "-q"]
    env = {k: v for k, v in os.environ.items() if k != "RILL_LIBRARY"}
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(wheels), str(clone / "bindings" / "python")], check=True, env=env
    )

    built = list(wheels.glob("*.whl"))
    if len(built) != 1:
        return [f"expected one wheel, found {built}"]
    wheel = built[0]
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    if not wheel.name.endswith(f"-py3-none-{platform}.whl"):
        errors.append(f"{wheel.name} is not tagged py3-none-{platform}")

    forbidden = {str(p) for p in (clone, REPO, work, Path.home()) if str(p) not in ("/", "")}
    cargo_home = os.environ.get("CARGO_HOME")
    if cargo_home:
        forbidden.add(cargo_home)
    with zipfile.ZipFile(wheel) as z:
        names = {n for n in z.namelist() if not n.startswith("rill-0")}
        if names != EXPECTED:
            errors.append(f"wheel contents: missing {sorted(EXPECTED - names)}, unexpected {sorted(names - EXPECTED)}")
        repo_texts = {name: (REPO / name).read_bytes() for name in LICENCES}
        for name, text in repo_texts.items():
            shipped = [n for n in z.namelist() if ".dist-info/" in n and n.endswith("/" + name)]
            if not shipped:
                errors.append(f"the wheel has no {name} in its .dist-info")
            elif any(z.read(n) != text for n in shipped):
                errors.append(f"{name} in the wheel differs from the repository's")
        for name in z.namelist():
            data = z.read(name)
            for path in forbidden:
                if path.encode() in data:
                    errors.append(f"{name} contains the absolute path {path}")
        lib = z.read("rill/librill.so") if "rill/librill.so" in names else b""
        if not lib.startswith(b"\x7fELF\x02\x01"):
            errors.append("librill.so in the wheel is not a 64-bit little-endian ELF library")
        else:
            found = sections(lib)
            debug = [n for n in found if n.startswith(".debug")]
            if debug:
                errors.append(f"librill.so in the wheel still has debug sections: {debug}")
            if tls_descriptors(lib, found) == 0:
                errors.append("librill.so in the wheel reaches its thread-locals without TLS descriptors")

    subprocess.run([*pip, "install", "--no-deps", str(wheel)], check=True, env=env)
    run = subprocess.run([str(py), "-c", SCRIPT], cwd=work, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        errors.append(f"the installed package failed:\n{run.stderr}")
    elif "site-packages/rill/librill.so" not in run.stdout:
        errors.append(f"the library was loaded from {run.stdout.strip()}, not from the package")
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
        print(f"wheel check: ok ({next((work / 'wheels').glob('*.whl')).name})")
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if problems else 0)
