"""Build-time hooks: build librill with cargo and ship it inside the wheel.

``pip install ./bindings/python`` (or ``pip wheel``) runs setuptools' build
backend, which runs ``BuildPy`` below:

- it runs ``cargo build --release -p rill-ffi`` in the workspace two levels
  up, every time (cargo is incremental: an up-to-date library costs a
  second), so a stale ``target/debug`` or ``target/release`` copy is never
  shipped;
- it builds into its own ``target/python-wheel`` with the release profile
  minus debug information (``CARGO_PROFILE_RELEASE_DEBUG=0``,
  ``CARGO_PROFILE_RELEASE_STRIP=debuginfo``: about 1 MB instead of 8) and
  with the checkout's and cargo's home paths remapped
  (``--remap-path-prefix``), so no absolute path of the build machine is
  baked into the library, plus the flags the workspace's
  ``.cargo/config.toml`` gives this host (TLS descriptors on x86-64 Linux),
  which cargo would drop once the remapping is passed in the environment;
  its own directory, because those flags would
  otherwise make cargo rebuild the ordinary ``target/release`` every time;
- it takes the library from cargo's own report of what it built, not from
  a guessed path, and copies it into the package.

``BdistWheel`` tags the wheel for this platform (``py3-none-linux_x86_64``):
the package is Python over ctypes, so any Python 3 on the platform can load
it, but the library it carries is native code.

Nothing of the build machine is recorded in the package: at run time the
library is found next to the package's own files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
WORKSPACE = HERE.parent.parent
LIB_NAME = "librill.so"


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
    remap = [f"--remap-path-prefix={WORKSPACE}=rill", f"--remap-path-prefix={cargo_home}=cargo"]
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
    target_dir = WORKSPACE / "target" / "python-wheel"
    cmd = [cargo, "build", "--release", "-p", "rill-ffi", "--target-dir", str(target_dir)]
    # RILL_CARGO_FEATURES=nats builds the library with the NATS bridge (rill.nats).
    features = env.get("RILL_CARGO_FEATURES", "").strip()
    if features:
        cmd += ["--features", features]
    cmd.append("--message-format=json-render-diagnostics")
    try:
        run = subprocess.run(cmd, cwd=WORKSPACE, env=env, stdout=subprocess.PIPE, check=True, text=True)
    except FileNotFoundError:
        raise RuntimeError("building the rill wheel needs cargo (https://rustup.rs) on PATH, or CARGO set") from None
    for line in run.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or message["target"]["name"] not in ("rill", "rill_ffi"):
            continue
        for f in message.get("filenames", []):
            if Path(f).name == LIB_NAME:
                return Path(f)
    raise RuntimeError(f"cargo built rill-ffi but reported no {LIB_NAME}")


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
        return "py3", "none", platform
