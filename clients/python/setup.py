"""The build step of toolplane-client: the gRPC stubs are generated from the wire contract while
the package is built, so ``pip install ./clients/python``, ``pip wheel`` and ``python -m build``
need nothing run first.

The ``.proto`` files are read from ``proto/`` beside this file when it exists (an sdist carries a
copy there) or else from the repository's ``proto/`` two levels up (a checkout). Building an sdist
copies them in, so a wheel built from that sdist, anywhere, has them. The stubs are written straight
into the build directory (package ``toolplane.v1``, mirroring the proto package, with ``.pyi``
files and ``py.typed``); they are not committed, and appear in the source tree only for an
editable install.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
SDIST_PROTO = HERE / "proto"
REPO_PROTO = HERE.parent.parent / "proto"
PACKAGE = "toolplane/v1"


def proto_root() -> Path:
    """Where the .proto files are: the sdist's copy, else the repository's."""
    for root in (SDIST_PROTO, REPO_PROTO):
        if (root / PACKAGE).is_dir():
            return root
    raise SystemExit(
        f"toolplane-client: no .proto files at {SDIST_PROTO} or {REPO_PROTO}; build from the "
        "repository (clients/python) or from an sdist made by `python -m build`"
    )


def proto_files(root: Path) -> list[str]:
    """The public contract's files (``toolplane/v1``); the test-only ``toolplane/testing`` is left out."""
    return sorted(p.relative_to(root).as_posix() for p in (root / PACKAGE).glob("*.proto"))


def generate(root: Path, out: Path) -> int:
    """Generates the messages, their .pyi and the gRPC stubs of every file under ``root`` into
    ``out``; returns how many .proto files there were."""
    from importlib.resources import files

    from grpc_tools import protoc

    protos = proto_files(root)
    if not protos:
        raise SystemExit(f"toolplane-client: {root / PACKAGE} holds no .proto files")
    shutil.rmtree(out / "toolplane", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    well_known = files("grpc_tools") / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"toolplane-client: protoc failed on {root}")
    # Regular packages, typed: the stubs import and type-check like any other code.
    for directory in [out / "toolplane", *(p for p in (out / "toolplane").rglob("*") if p.is_dir())]:
        (directory / "__init__.py").touch()
    (out / "toolplane" / "py.typed").touch()
    return len(protos)


class BuildPyWithStubs(build_py):
    """``build_py`` that also generates ``toolplane.v1`` into the build directory.

    An editable install (``pip install -e``) imports the packages from the source tree, so there
    the stubs are generated beside ``toolplane_client`` (ignored by git) and ``toolplane`` is
    added to the packages the install maps; rerun it after ``proto/`` changes."""

    def run(self) -> None:
        super().run()
        root = proto_root()
        out = HERE if self.editable_mode else Path(self.build_lib)
        count = generate(root, out)
        if self.editable_mode:
            packages = self.distribution.packages
            packages += [p for p in ("toolplane", "toolplane.v1") if p not in packages]
        self.announce(f"generated the stubs of {count} .proto files from {root} into {out}", level=2)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        generated = Path(self.build_lib) / "toolplane"
        if generated.is_dir():
            outputs += [str(p) for p in generated.rglob("*") if p.is_file()]
        return outputs


class SdistWithProtos(sdist):
    """``sdist`` that carries a copy of the .proto files in ``proto/``."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        root = proto_root()
        for name in proto_files(root):
            target = Path(base_dir) / "proto" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / name, target)


setup(cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProtos})
