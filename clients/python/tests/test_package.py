"""The package as a user gets it: installed with one pip command, its stubs generated during the
build (in no source tree), typed, and buildable as an sdist whose wheel, built elsewhere, has the
stubs too; and as a developer gets it from an editable install."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
import toolplane
import toolplane_client
from toolplane.v1 import runtime_pb2, runtime_pb2_grpc

SOURCE = Path(__file__).resolve().parents[1]


def test_the_tests_import_the_installed_package_with_its_generated_stubs():
    installed = Path(toolplane_client.__file__).resolve().parent
    assert SOURCE not in installed.parents, f"imported from the source tree: {installed}"
    stubs = Path(toolplane.__file__).resolve().parent
    assert stubs.parent == installed.parent, "the stubs are installed beside the client"
    assert not (SOURCE / "toolplane").exists(), "the build wrote stubs into the source tree"
    assert runtime_pb2.DESCRIPTOR.package == "toolplane.v1"
    assert hasattr(runtime_pb2_grpc, "RuntimeServiceStub")
    assert toolplane_client.__version__ == "0.2.0"


def test_the_package_is_typed():
    installed = Path(toolplane_client.__file__).resolve().parent
    stubs = Path(toolplane.__file__).resolve().parent
    assert (installed / "py.typed").is_file()
    assert (stubs / "py.typed").is_file()
    assert (stubs / "v1" / "runtime_pb2.pyi").is_file()
    assert "class CreateRunRequest" in (stubs / "v1" / "runtime_pb2.pyi").read_text()


@pytest.mark.packaging
def test_python_m_build_makes_an_sdist_with_the_protos_and_from_it_a_wheel_with_the_stubs(tmp_path):
    # `python -m build` builds the sdist, then the wheel from the sdist unpacked in a temporary
    # directory, away from the repository's proto/. In this venv (`--no-isolation`, the test
    # extra carries build-system.requires): two isolated build environments cost a minute and
    # prove nothing the isolated build of the install did not.
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(SOURCE)], check=True)
    (sdist,) = dist.glob("toolplane_client-*.tar.gz")
    (wheel,) = dist.glob("toolplane_client-*.whl")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    protos = SOURCE.parents[1] / "proto" / "toolplane" / "v1"
    for proto in protos.glob("*.proto"):
        assert any(n.endswith(f"/proto/toolplane/v1/{proto.name}") for n in names), proto.name
    assert not any("/toolplane/v1/" in n and n.endswith(".py") for n in names), "an sdist carries no stubs"

    with zipfile.ZipFile(wheel) as archive:
        files = set(archive.namelist())
    for proto in protos.glob("*.proto"):
        stem = proto.stem
        assert {f"toolplane/v1/{stem}_pb2.py", f"toolplane/v1/{stem}_pb2.pyi", f"toolplane/v1/{stem}_pb2_grpc.py"} <= files
    assert {"toolplane/py.typed", "toolplane_client/py.typed", "toolplane_client/aio.py"} <= files
    assert not any(f.startswith("toolplane/testing/") for f in files), "the test-only service is not shipped"


@pytest.mark.packaging
def test_an_editable_install_generates_the_stubs_beside_the_source(tmp_path):
    env = tmp_path / "venv"
    # No pip of its own (ensurepip costs more than the install): this venv's pip installs into it.
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    try:
        install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--editable", str(SOURCE)]
        subprocess.run(install, check=True)
        shown = subprocess.run(
            [str(python), "-c", "import toolplane_client, toolplane.v1.runtime_pb2 as r; print(toolplane_client.__file__); print(r.__file__)"],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        assert shown == [str(SOURCE / "toolplane_client" / "__init__.py"), str(SOURCE / "toolplane" / "v1" / "runtime_pb2.py")]
    finally:
        for generated in ("toolplane", "build", "toolplane_client.egg-info"):
            shutil.rmtree(SOURCE / generated, ignore_errors=True)
