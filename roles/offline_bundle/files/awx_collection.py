# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Make the awx.awx collection artifact from the `ansible` package's wheel, which PyPI serves.

ansible 14 no longer bundles awx.awx; ansible 13.8.0 (the last that does) carries awx.awx 24.6.1, the newest
release of that collection, under ansible_collections/awx/awx/ of its wheel. A collection artifact is a .tar.gz
of the collection's files with MANIFEST.json and FILES.json at its root, which is what the wheel holds there,
less the collection's tests/ that the ansible package strips (its FILES.json still lists them, and
ansible-galaxy refuses an artifact that lacks a listed entry: "Unable to extract 'tests' from collection").
This script copies those members into NAMESPACE-NAME-VERSION.tar.gz with FILES.json listing exactly the files
it holds (their sha256 checked against the original list) and MANIFEST.json pointing at that FILES.json,
installable without Galaxy:

    ansible-galaxy collection install --offline awx-awx-24.6.1.tar.gz

Usage: awx_collection.py WHEEL OUTDIR [NAMESPACE.NAME]. Prints the artifact's path. Idempotent: an artifact
already there is left alone.
"""

import hashlib
import io
import json
import os
import sys
import tarfile
import zipfile


def collection_members(names, namespace, name):
    """The wheel members of collection namespace.name: {path inside the artifact: path in the wheel}."""
    prefix = "ansible_collections/%s/%s/" % (namespace, name)
    members = {}
    for member in names:
        if member.startswith(prefix) and not member.endswith("/") and "/__pycache__/" not in member:
            members[member[len(prefix):]] = member
    if "MANIFEST.json" not in members or "FILES.json" not in members:
        raise ValueError("%s.%s is not in this wheel (no %sMANIFEST.json and FILES.json): take an ansible "
                         "release that bundles it (awx.awx: ansible 13.8.0 or older)" % (namespace, name, prefix))
    return members


def files_list(original, contents):
    """FILES.json's entries for exactly ``contents`` ({path: bytes}), in the original list's order.

    A file whose sha256 differs from the original list's is an error: the package changed it.
    """
    present_dirs = {"/".join(rel.split("/")[:depth]) for rel in contents for depth in range(1, rel.count("/") + 1)}
    entries = []
    for entry in original:
        name = entry["name"]
        if entry["ftype"] == "dir":
            if name == "." or name in present_dirs:
                entries.append(entry)
        elif name in contents:
            digest = hashlib.sha256(contents[name]).hexdigest()
            if entry.get("chksum_sha256") not in (None, digest):
                raise ValueError("%s differs from the collection's FILES.json (sha256 %s, listed %s)"
                                 % (name, digest, entry.get("chksum_sha256")))
            entries.append(dict(entry, chksum_type="sha256", chksum_sha256=digest))
    unlisted = sorted(set(contents) - {e["name"] for e in entries} - {"MANIFEST.json", "FILES.json"})
    if unlisted:
        raise ValueError("files the collection's FILES.json does not list: %s" % ", ".join(unlisted[:5]))
    return entries


def make_artifact(wheel, outdir, fqcn="awx.awx"):
    """Write outdir/NAMESPACE-NAME-VERSION.tar.gz from the wheel; return (path, changed)."""
    namespace, name = fqcn.split(".", 1)
    with zipfile.ZipFile(wheel) as archive:
        members = collection_members(archive.namelist(), namespace, name)
        info = json.loads(archive.read(members["MANIFEST.json"]))["collection_info"]
        if (info.get("namespace"), info.get("name")) != (namespace, name):
            raise ValueError("MANIFEST.json names %s.%s, not %s" % (info.get("namespace"), info.get("name"), fqcn))
        path = os.path.join(outdir, "%s-%s-%s.tar.gz" % (namespace, name, info["version"]))
        if os.path.exists(path):
            return path, False
        os.makedirs(outdir, exist_ok=True)
        contents = {rel: archive.read(member) for rel, member in members.items()}
        files = json.loads(contents["FILES.json"])
        files["files"] = files_list(files["files"], contents)
        contents["FILES.json"] = json.dumps(files, indent=4).encode()
        manifest = json.loads(contents["MANIFEST.json"])
        manifest["file_manifest_file"]["chksum_sha256"] = hashlib.sha256(contents["FILES.json"]).hexdigest()
        contents["MANIFEST.json"] = json.dumps(manifest, indent=4).encode()
        partial = path + ".part"
        with tarfile.open(partial, "w:gz", format=tarfile.PAX_FORMAT) as tar:
            dirs = set()
            for rel in sorted(members):
                parts = rel.split("/")[:-1]
                for depth in range(1, len(parts) + 1):
                    directory = "/".join(parts[:depth])
                    if directory not in dirs:
                        dirs.add(directory)
                        entry = tarfile.TarInfo(directory)
                        entry.type, entry.mode = tarfile.DIRTYPE, 0o755
                        tar.addfile(entry)
                data = contents[rel]
                zinfo = archive.getinfo(members[rel])
                entry = tarfile.TarInfo(rel)
                entry.size = len(data)
                entry.mode = 0o755 if (zinfo.external_attr >> 16) & 0o111 else 0o644
                tar.addfile(entry, io.BytesIO(data))
        os.replace(partial, path)
    return path, True


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    try:
        path, changed = make_artifact(*argv)
    except (ValueError, KeyError, zipfile.BadZipFile) as exc:
        sys.stderr.write("awx_collection: %s\n" % exc)
        return 1
    print(json.dumps({"path": path, "changed": changed}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
