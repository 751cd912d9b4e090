#!/usr/bin/env python3
"""Unpack every archive scripts/gpu-pack.sh made (.gpuz/*.tar.xz) into the repository root."""
import glob
import tarfile

for path in sorted(glob.glob(".gpuz/*.tar.xz")):
    with tarfile.open(path) as archive:
        archive.extractall(".", filter="tar")
    print("unpacked", path)
