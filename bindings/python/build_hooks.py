"""Build-time hooks: build librill with cargo and ship it inside the wheel.

``pip install ./bindings/python`` (or ``pip wheel``) runs setuptools' build
backend, which runs ``BuildPy`` below:

- it runs ``cargo build --release -p rill-ffi`` in the rill workspace (two
  levels up in a checkout, ``rust/`` in an sdist: see ``Sdist``), every time
  (cargo is incremental: an up-to-date library costs a second), so a stale
  ``target/debug`` or ``target/release`` copy is never shipped;
- it says so where the person installing sees it: pip hides a build
  backend's output unless run with ``-v``, so the line also goes to the
  terminal when there is one (``pip install -v`` shows cargo's own output);
- it builds into its own ``python-wheel`` directory under ``target/`` (or
  under ``CARGO_TARGET_DIR`` when that is set, so builds from several
  unpacked sdists can share one) with the release profile minus debug
  information (``CARGO_PROFILE_RELEASE_DEBUG=0``,
  ``CARGO_PROFILE_RELEASE_STRIP=debuginfo``: about 1 MB instead of 8) and
  with cargo's home and the target directory remapped
  (``--remap-path-prefix``; cargo compiles the workspace's own crates with
  paths relative to it), so no absolute path of the build machine is
  baked into the library, plus the flags the workspace's
  ``.cargo/config.toml`` gives this host (TLS descriptors on x86-64 Linux),
  which cargo would drop once the remapping is passed in the environment;
  its own directory, because those flags would otherwise make cargo rebuild
  the ordinary ``target/release`` every time;
- it takes the library from cargo's own report of what it built, not from
  a guessed path, and copies it into the package.

``BdistWheel`` tags the wheel ``py3-none-<platform>``: the package is
Python over ctypes, so any Python 3 on the platform can load it, but the
library it carries is native code. On Linux the platform is
``manylinux_<major>_<minor>_<arch>`` (PEP 600), from the newest glibc symbol
version the library needs (read from its ELF version needs), when every
library it links is one PEP 600 lets a wheel take from the system; else the
plain ``linux_<arch>``, which a package index refuses. It also puts the
workspace's licence files (``LICENSE*`` at its root) into the wheel's
``.dist-info/licenses``.

``Sdist`` makes a source distribution that builds on its own: it carries
the parts of the workspace cargo needs (every file git tracks, less the
directories named in ``SDIST_SKIP``) under ``rust/``, where ``BuildPy``
finds them when the package is built from the unpacked sdist.

Nothing of the build machine is recorded in the package: at run time the
library is found next to the package's own files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
# Where an sdist carries the workspace, beside this file.
SDIST_WORKSPACE = "rust"
# The workspace: the sdist's copy when built from one, else the checkout's.
WORKSPACE = HERE / SDIST_WORKSPACE if (HERE / SDIST_WORKSPACE / "Cargo.toml").is_file() else HERE.parent.parent
# The workspace's top-level entries an sdist leaves out: the bindings (this
# package is the sdist's own root), the fuzz workspace (excluded from the
# cargo workspace), documentation, CI scripts and build output. Everything
# else is a workspace member cargo reads, or its manifest names.
SDIST_SKIP = frozenset({"bindings", "fuzz", "docs", ".ci", ".github", "target", ".git"})
LIB_NAME = "librill.so"
# The files at the workspace's root that are its licence, carried in the wheel.
LICENSE_PREFIXES = ("LICENSE", "LICENCE", "COPYING", "NOTICE")


def config_rustflags(env: dict[str, str]) -> list[str]:
    """The rustflags ``.cargo/config.toml`` sets for the host's target.

    Cargo uses them only when the environment sets no RUSTFLAGS of its own;
    this build always does (the path remapping), so it adds them itself.
    Only ``[target.<host triple>] rustflags`` is read: the one form the
    workspace's config uses.
    """
    config = WORKSPACE / ".cargo" / "config.toml"
    if not config.is_file():
        return []
    rustc = env.get("RUSTC", "rustc")
    try:
        version = subprocess.run([rustc, "-vV"], env=env, stdout=subprocess.PIPE, check=True, text=True).stdout
    except FileNotFoundError:
        raise RuntimeError("building the rill wheel needs rustc (https://rustup.rs) on PATH, or RUSTC set") from None
    host = next((line.split(":", 1)[1].strip() for line in version.splitlines() if line.startswith("host:")), "")
    flags = tomllib.loads(config.read_text()).get("target", {}).get(host, {}).get("rustflags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise RuntimeError(f"{config}: target.{host}.rustflags is not a list of strings")
    return flags


def cargo_build() -> Path:
    """Builds librill in release and returns the path cargo reports for it."""
    if not (WORKSPACE / "ffi" / "Cargo.toml").is_file():
        raise RuntimeError(
            f"building the rill wheel needs the rill workspace (with ffi/Cargo.toml) at {WORKSPACE}; "
            "build from a checkout of the repository"
        )
    cargo = os.environ.get("CARGO", "cargo")
    cargo_home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    # CARGO_TARGET_DIR lets builds from different places (a checkout, an
    # unpacked sdist) share compiled dependencies; python-wheel inside it, as
    # these flags differ from a plain cargo build's.
    target_dir = Path(os.environ.get("CARGO_TARGET_DIR") or WORKSPACE / "target").resolve() / "python-wheel"
    # The workspace's own crates are compiled with paths relative to it (cargo
    # runs rustc there); the registry's sources and build scripts' output are
    # absolute. The checkout's path is left out of the flags so that builds
    # from two places sharing a target directory also share its dependencies
    # (cargo rebuilds everything when the flags change); the wheel check
    # looks for the checkout's path in the library. When several prefixes
    # match, rustc applies the last.
    remap = [f"--remap-path-prefix={cargo_home}=cargo", f"--remap-path-prefix={target_dir}=target"]
    env = dict(os.environ)
    # The encoded form (flags separated by 0x1f) keeps paths with spaces whole.
    flags = env.pop("CARGO_ENCODED_RUSTFLAGS", "")
    given = flags.split("\x1f") if flags else env.pop("RUSTFLAGS", "").split()
    # As cargo does: flags given in the environment replace the config's.
    if not given:
        given = config_rustflags(env)
    env["CARGO_ENCODED_RUSTFLAGS"] = "\x1f".join([*given, *remap])
    env["CARGO_PROFILE_RELEASE_DEBUG"] = "0"
    env["CARGO_PROFILE_RELEASE_STRIP"] = "debuginfo"
    if WORKSPACE == HERE / SDIST_WORKSPACE:
        mark_sources_new()
    cmd = [cargo, "build", "--release", "-p", "rill-ffi", "--target-dir", str(target_dir)]
    # RILL_CARGO_FEATURES=nats builds the library with the NATS bridge (rill.nats).
    features = env.get("RILL_CARGO_FEATURES", "").strip()
    if features:
        cmd += ["--features", features]
    cmd.append("--message-format=json-render-diagnostics")
    with_features = f" with features {features}" if features else ""
    notify(
        f"rill: building librill{with_features} with cargo in {target_dir} "
        "(this takes a few minutes on a fresh machine; `pip install -v` shows cargo's output)..."
    )
    try:
        # cargo's progress and diagnostics go to stderr, which pip shows with -v.
        run = subprocess.run(cmd, cwd=WORKSPACE, env=env, stdout=subprocess.PIPE, check=True, text=True)
    except FileNotFoundError:
        raise RuntimeError("building the rill wheel needs cargo (https://rustup.rs) on PATH, or CARGO set") from None
    notify("rill: librill built")
    for line in run.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or message["target"]["name"] not in ("rill", "rill_ffi"):
            continue
        for f in message.get("filenames", []):
            if Path(f).name == LIB_NAME:
                return Path(f)
    raise RuntimeError(f"cargo built rill-ffi but reported no {LIB_NAME}")


def mark_sources_new() -> None:
    """Sets the sdist's workspace files' modification times to now.

    Cargo names the workspace's crates by their path inside the workspace
    and calls them up to date when no source is newer than their last build.
    A target directory shared with another source tree (CARGO_TARGET_DIR)
    may hold a build of other sources at the same paths, newer than an
    sdist's files (a tarball keeps their times): without this, cargo would
    keep that library. The dependencies, named by their registry version,
    stay shared.
    """
    for path in WORKSPACE.rglob("*"):
        if path.is_file() and path.relative_to(WORKSPACE).parts[0] != "target":
            os.utime(path)


def notify(text: str) -> None:
    """Prints a line of the build's progress to stderr and, when stderr is
    not the terminal, to the terminal too: pip captures a build backend's
    output and shows it only with ``-v`` (or after a failure), so without
    this a first install looks stuck for minutes. No terminal (CI, a pipe):
    stderr only."""
    print(text, file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        return
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(f"\n{text}\n")
    except OSError:  # no controlling terminal
        pass


# ELF: the fields this file reads, of a 64-bit little-endian file.
ELF_MAGIC_64_LE = b"\x7fELF\x02\x01"
# Section types: the dynamic section, and the GNU version needs (SHT_GNU_verneed).
SHT_DYNAMIC = 6
SHT_GNU_VERNEED = 0x6FFFFFFE
# A dynamic entry naming a library the file needs (DT_NEEDED).
DT_NEEDED = 1
# A glibc symbol version: GLIBC_<major>.<minor>[.<patch>].
GLIBC_VERSION = re.compile(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?")
# PEP 600: the libraries a manylinux wheel may take from the system (the
# auditwheel policies' list, less graphics ones librill never links).
MANYLINUX_SYSTEM_LIBS = frozenset(
    {
        "libc.so.6",
        "libm.so.6",
        "libdl.so.2",
        "librt.so.1",
        "libpthread.so.0",
        "libutil.so.1",
        "libnsl.so.1",
        "libresolv.so.2",
        "libgcc_s.so.1",
        "libstdc++.so.6",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
    }
)


def elf_needs(elf: bytes) -> tuple[set[str], set[str]]:
    """The libraries a 64-bit little-endian ELF file needs (``DT_NEEDED``)
    and the symbol versions it needs from them (``.gnu.version_r``), both as
    names; two empty sets for any other file."""
    if not elf.startswith(ELF_MAGIC_64_LE):
        return set(), set()

    def u(at: int, size: int) -> int:
        return int.from_bytes(elf[at : at + size], "little")

    def string(table: int, at: int) -> str:
        start = table + at
        return elf[start : elf.index(b"\0", start)].decode("ascii", "replace")

    shoff, shentsize, shnum = u(0x28, 8), u(0x3A, 2), u(0x3C, 2)
    # Elf64_Shdr: sh_type at 4, sh_offset at 24, sh_size at 32, sh_link at 40.
    headers = [shoff + i * shentsize for i in range(shnum)]
    libs: set[str] = set()
    versions: set[str] = set()
    for h in headers:
        kind, offset, size, link = u(h + 4, 4), u(h + 24, 8), u(h + 32, 8), u(h + 40, 4)
        if kind not in (SHT_DYNAMIC, SHT_GNU_VERNEED) or link >= shnum:
            continue
        strings = u(headers[link] + 24, 8)  # the linked string table's sh_offset
        if kind == SHT_DYNAMIC:
            # Elf64_Dyn: d_tag, d_val, 8 bytes each.
            for at in range(offset, offset + size - 15, 16):
                if u(at, 8) == DT_NEEDED:
                    libs.add(string(strings, u(at + 8, 8)))
            continue
        # Elf64_Verneed: vn_cnt at 2, vn_aux at 8, vn_next at 12 (0 ends the
        # list); Elf64_Vernaux: vna_name at 8, vna_next at 12.
        need = offset
        while True:
            aux = need + u(need + 8, 4)
            for _ in range(u(need + 2, 2)):
                versions.add(string(strings, u(aux + 8, 4)))
                if u(aux + 12, 4) == 0:
                    break
                aux += u(aux + 12, 4)
            if u(need + 12, 4) == 0:
                break
            need += u(need + 12, 4)
    return libs, versions


def manylinux_platform(platform: str, library: Path) -> str:
    """``platform`` (``linux_<arch>``) as the PEP 600 tag the library really
    fits, ``manylinux_<glibc major>_<minor>_<arch>``; ``platform`` itself
    when the library needs no glibc version or links a library a manylinux
    wheel may not take from the system."""
    if not platform.startswith("linux_") or not library.is_file():
        return platform
    libs, versions = elf_needs(library.read_bytes())
    glibc = [(int(m[1]), int(m[2])) for m in map(GLIBC_VERSION.fullmatch, versions) if m]
    outside = sorted(libs - MANYLINUX_SYSTEM_LIBS)
    if not glibc or outside:
        why = f"it links {outside}" if outside else "it needs no glibc symbol version"
        notify(f"rill: the wheel is tagged {platform}, which a package index refuses: {why}")
        return platform
    major, minor = max(glibc)
    return f"manylinux_{major}_{minor}_{platform[len('linux_') :]}"


def workspace_licenses() -> list[Path]:
    """The licence files at the workspace's root."""
    return sorted(p for p in WORKSPACE.iterdir() if p.is_file() and p.name.upper().startswith(LICENSE_PREFIXES))


def workspace_files() -> list[str]:
    """The workspace's files an sdist carries, relative to it: what git
    tracks in a checkout (no build output, nothing local), every file when
    it is not one (an unpacked sdist's copy), less ``SDIST_SKIP``."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=WORKSPACE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True
        ).stdout
        files = [f for f in listed.decode().split("\0") if f]
    except (FileNotFoundError, subprocess.CalledProcessError):  # no git, or not a checkout
        files = [str(p.relative_to(WORKSPACE)) for p in WORKSPACE.rglob("*") if p.is_file()]
    return sorted(f for f in files if Path(f).parts[0] not in SDIST_SKIP and (WORKSPACE / f).is_file())


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        built = cargo_build()
        out = Path(self.build_lib) / "rill"
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, out / LIB_NAME)
        (out / LIB_NAME).chmod(0o755)


class BdistWheel(bdist_wheel):
    def finalize_options(self) -> None:
        # It carries a native library: build and install as platform files
        # (build/lib.<platform>, the wheel's platlib root), not pure ones.
        self.distribution.has_ext_modules = lambda: True  # type: ignore[method-assign]
        super().finalize_options()

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        build_lib = self.distribution.get_command_obj("build_py").build_lib
        return "py3", "none", manylinux_platform(platform, Path(build_lib) / "rill" / LIB_NAME)

    def egg2dist(self, egginfo_path: str, distinfo_path: str) -> None:
        super().egg2dist(egginfo_path, distinfo_path)
        # The workspace's licence lives above this package, where setuptools'
        # license-files cannot reach: copy it into .dist-info/licenses and
        # name it in METADATA, unless setuptools already put it there.
        distinfo = Path(distinfo_path)
        present = {p.name for p in distinfo.rglob("*") if p.is_file()}
        added = []
        for license_file in workspace_licenses():
            if license_file.name not in present:
                (distinfo / "licenses").mkdir(exist_ok=True)
                shutil.copyfile(license_file, distinfo / "licenses" / license_file.name)
                added.append(f"License-File: {license_file.name}\n")
        if added:
            metadata = distinfo / "METADATA"
            text = metadata.read_text(encoding="utf-8")
            # The headers end at the first blank line; the description follows.
            end = text.find("\n\n") + 1 or len(text)
            metadata.write_text(text[:end] + "".join(added) + text[end:], encoding="utf-8")


class Sdist(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        if not (WORKSPACE / "ffi" / "Cargo.toml").is_file():
            raise RuntimeError(f"an sdist of rill needs the rill workspace (with ffi/Cargo.toml) at {WORKSPACE}")
        # The workspace cargo builds, under rust/ (see WORKSPACE).
        for name in workspace_files():
            dest = Path(base_dir) / SDIST_WORKSPACE / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(WORKSPACE / name, dest)
