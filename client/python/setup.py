"""Builds and installs leased's Python client (the package `leased`).

    pip install ./client/python     (from a clone of leased)

The messages are generated from the clone's proto/ directory with protoc
(Debian's protobuf-compiler) as the package is built; grpcio and protobuf
are Debian's python3-grpcio and python3-protobuf. Without a
pyproject.toml, pip builds with the setuptools already installed, so
nothing is downloaded. The test command builds the package into the build
tree with `setup.py build --build-lib DIR`.
"""
import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "proto")
PROTOS = ["mecatl/driver/v1/session_lease.proto",
          "leased/admin/v1/admin.proto", "leased/v1/leases.proto"]


class BuildWithMessages(build_py):
    """build_py, then protoc's Python messages into leased/_gen."""

    def run(self):
        super().run()
        out = os.path.join(self.build_lib, "leased", "_gen")
        os.makedirs(out, exist_ok=True)
        subprocess.run(["protoc", "-I", PROTO, "-I", "/usr/include",
                        "--python_out=" + out] + PROTOS, check=True)


os.chdir(HERE)  # setuptools finds packages relative to the current directory
setup(
    name="leased",
    version="0.1.0",
    description="Client of the leased lease service: calls, keeper, hold, "
                "watch",
    packages=["leased"],
    python_requires=">=3.9",
    install_requires=["grpcio>=1.51", "protobuf>=3.20"],
    cmdclass={"build_py": BuildWithMessages},
)
