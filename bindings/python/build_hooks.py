"""Install-time hook: ship librill.so inside the package when it has been
built, and remember where the workspace is, so an installed package can
fall back to the workspace's target/release or target/debug."""

from pathlib import Path
import shutil

from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
WORKSPACE = HERE.parent.parent


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        out = Path(self.build_lib) / "rill"
        out.mkdir(parents=True, exist_ok=True)
        (out / "_workspace.py").write_text(f"ROOT = {str(WORKSPACE)!r}\n")
        for profile in ("release", "debug"):
            lib = WORKSPACE / "target" / profile / "librill.so"
            if lib.is_file():
                shutil.copy2(lib, out / "librill.so")
                break
