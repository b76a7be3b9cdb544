"""Self-test of shoal_fixtures.oci: the generated layouts are valid, deterministic and complete.

Every property is recomputed from the bytes on disk (decompress, hash, parse), never taken from
the generator's own description.
"""

import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))

from shoal_fixtures import FixtureTestCase, oci  # noqa: E402


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class OciLayoutTest(FixtureTestCase):
    def read_blob(self, layout, digest):
        data = layout.blob_path(digest).read_bytes()
        self.assertEqual(sha(data), digest, "blob file content must match its name")
        return data

    def check_image(self, layout, image, fmt):
        media = oci.MEDIA_TYPES[fmt]
        manifest_bytes = self.read_blob(layout, image.manifest.digest)
        self.assertEqual(len(manifest_bytes), image.manifest.size)
        manifest = json.loads(manifest_bytes)
        self.assertEqual(manifest["schemaVersion"], 2)
        self.assertEqual(manifest["mediaType"], media["manifest"])
        self.assertEqual(manifest["config"]["mediaType"], media["config"])
        config = json.loads(self.read_blob(layout, manifest["config"]["digest"]))
        self.assertEqual((config["os"], config["architecture"]), image.platform)
        diff_ids = config["rootfs"]["diff_ids"]
        self.assertEqual(len(diff_ids), len(manifest["layers"]))
        for desc, diff_id in zip(manifest["layers"], diff_ids):
            data = self.read_blob(layout, desc["digest"])
            self.assertEqual(len(data), desc["size"])
            if desc["mediaType"] == media["layer_gzip"]:
                tar = gzip.decompress(data)
            else:
                self.assertEqual(desc["mediaType"], media["layer_tar"])
                tar = data
            self.assertEqual(sha(tar), diff_id, "diff_id must be the sha256 of the tar")
            with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
                members = [m for m in tf.getmembers() if m.isfile()]
                layer = next(x for x in image.layers if x.digest == desc["digest"])
                self.assertEqual(sorted((m.name, m.size) for m in members),
                                 sorted((f[0], f[1]) for f in layer.files))
                for m in members:
                    content = tf.extractfile(m).read()
                    want = next(f[2] for f in layer.files if f[0] == m.name)
                    self.assertEqual(sha(content), want)
        return manifest

    def test_oci_and_docker_single_images(self):
        d = self.tmpdir()
        specs = [oci.LayerSpec(size=70_000, seed=1, files=3), oci.empty_layer(),
                 oci.LayerSpec(size=9_000, seed=2, compression="none")]
        for fmt in ("oci", "docker"):
            layout = oci.make_image(d / fmt, specs, fmt=fmt)
            self.assertEqual(layout.top, layout.images[0].manifest)
            manifest = self.check_image(layout, layout.images[0], fmt)
            self.assertEqual(len(manifest["layers"]), 3)
            index = json.loads((d / fmt / "index.json").read_text())
            self.assertEqual(index["manifests"][0]["digest"], layout.top.digest)
            self.assertEqual(index["manifests"][0]["annotations"][oci.REF_NAME], "v1")
            self.assertEqual(json.loads((d / fmt / "oci-layout").read_text()),
                             {"imageLayoutVersion": "1.0.0"})
            self.assertEqual(set(oci.verify_layout(d / fmt)), set(layout.all_blobs()))

    def test_every_non_empty_layer_has_a_real_file(self):
        layout = oci.make_image(self.tmpdir() / "l", [oci.LayerSpec(size=1, seed="tiny"),
                                                      oci.LayerSpec(size=0, seed="zero")])
        for layer in layout.images[0].layers:
            self.assertGreaterEqual(len(layer.files), 1)

    def test_empty_layer_is_the_canonical_empty_tar(self):
        layout = oci.make_image(self.tmpdir() / "e", [oci.empty_layer()])
        layer = layout.images[0].layers[0]
        tar = gzip.decompress(layout.blob_path(layer.digest).read_bytes())
        self.assertEqual(tar, b"\0" * 1024)
        # Docker's well-known diff_id of the empty layer.
        self.assertEqual(layer.diff_id, "sha256:5f70bf18a086007016e948b04aed3b82103a36bea4175"
                                         "5b6cddfaf10ace3c6ef")
        self.assertEqual(layer.files, ())

    def test_same_seed_same_bytes_different_seed_different_bytes(self):
        d = self.tmpdir()
        a = oci.make_image(d / "a", [oci.LayerSpec(size=50_000, seed="s")])
        b = oci.make_image(d / "b", [oci.LayerSpec(size=50_000, seed="s")])
        c = oci.make_image(d / "c", [oci.LayerSpec(size=50_000, seed="t")])
        self.assertEqual(a.layer_digests, b.layer_digests)
        self.assertEqual(a.top.digest, b.top.digest)
        self.assertEqual((d / "a" / "blobs").exists(), True)
        self.assertEqual(a.blob_path(a.layer_digests[0]).read_bytes(),
                         b.blob_path(b.layer_digests[0]).read_bytes())
        self.assertNotEqual(a.layer_digests, c.layer_digests)

    def test_layer_shared_by_two_images_in_one_layout(self):
        d = self.tmpdir() / "shared"
        shared = oci.LayerSpec(size=20_000, seed="base")
        one = oci.make_image(d, [shared, oci.LayerSpec(size=1000, seed="app1")], tag="one")
        two = oci.make_image(d, [shared, oci.LayerSpec(size=1000, seed="app2")], tag="two")
        self.assertEqual(one.images[0].layers[0].digest, two.images[0].layers[0].digest)
        self.assertNotEqual(one.top.digest, two.top.digest)
        tags = {m["annotations"][oci.REF_NAME]: m["digest"]
                for m in json.loads((d / "index.json").read_text())["manifests"]}
        self.assertEqual(tags, {"one": one.top.digest, "two": two.top.digest})

    def test_multiarch_index_and_manifest_list(self):
        d = self.tmpdir()
        for fmt in ("oci", "docker"):
            layout = oci.make_multiarch(d / fmt, [oci.LayerSpec(size=4000, seed="m")], fmt=fmt,
                                        shared=[oci.LayerSpec(size=3000, seed="common")])
            index = json.loads(self.read_blob(layout, layout.top.digest))
            self.assertEqual(index["mediaType"], oci.MEDIA_TYPES[fmt]["index"])
            plats = [(m["platform"]["os"], m["platform"]["architecture"])
                     for m in index["manifests"]]
            self.assertEqual(plats, [("linux", "amd64"), ("linux", "arm64")])
            for image in layout.images:
                self.check_image(layout, image, fmt)
            amd, arm = layout.image("amd64"), layout.image("arm64")
            self.assertNotEqual(amd.layers[0].digest, arm.layers[0].digest)
            self.assertEqual(amd.layers[1].digest, arm.layers[1].digest)
            # Index + 2 manifests + 2 configs + 2 own layers + 1 shared layer.
            self.assertEqual(len(layout.all_blobs()), 8)

    def test_docker_images_export_to_skopeo_dir_transport(self):
        layout = oci.make_multiarch(self.tmpdir() / "m", fmt="docker")
        self.assertTrue(layout.skopeo_source.startswith("dir:"))
        exported = layout.export_dir()
        self.assertEqual((exported / "version").read_text(), "Directory Transport Version: 1.1\n")
        self.assertEqual(set(oci.verify_dir(exported)), set(layout.all_blobs()))

    def test_large_layer_is_fast_and_streamed(self):
        size = 64 * oci.MIB  # the 300 MiB case runs in large_test.py
        t0 = time.monotonic()
        layout = oci.make_image(self.tmpdir() / "big", [oci.large_layer(size)])
        seconds = time.monotonic() - t0
        layer = layout.images[0].layers[0]
        self.assertEqual(layer.media_type, oci.MEDIA_TYPES["oci"]["layer_gzip"])
        self.assertGreater(layer.size, size)  # incompressible payload, stored blocks
        self.assertEqual(oci.sha256_file(layout.blob_path(layer.digest)), layer.digest)
        with gzip.open(layout.blob_path(layer.digest)) as f:
            h = hashlib.sha256()
            while chunk := f.read(oci.MIB):
                h.update(chunk)
        self.assertEqual("sha256:" + h.hexdigest(), layer.diff_id)
        print(f"\n64 MiB layer generated in {seconds:.2f}s", file=sys.stderr)
        self.assertLess(seconds, 30)

    def test_bad_specs_are_refused(self):
        with self.assertRaises(ValueError):
            oci.LayerSpec(compression="zstd")
        with self.assertRaises(ValueError):
            oci.LayerSpec(size=-1)
        with self.assertRaises(ValueError):
            oci.LayoutWriter(self.tmpdir(), fmt="v1")


if __name__ == "__main__":
    unittest.main(verbosity=2)
