"""Self-test of the pod sandbox fixture: real CRI pod sandboxes in a private containerd.

Run as root: PYTHONPATH=tests/support python3 tests/support/cri_pod_selftest.py
(plain unittest; not registered with CMake). It starts containerd 1.6 with the CRI plugin and the
locally built pause image as `sandbox_image`, runs a sandbox labelled shoal.io/job=train in the
host network namespace, checks that ListPodSandbox shows it READY with the label and that its
pause task runs, stops it (NOTREADY), removes it (gone), and checks that `Containerd.stop()`
removes a sandbox left running. About a second here once the pause image is cached (the first
run also compiles pause.c).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import unittest

from shoal_fixtures.containerd import CRI_NAMESPACE, Containerd
from shoal_fixtures.pause_image import PAUSE_IMAGE

LABELS = {"shoal.io/job": "train", "shoal.io/rank": "0"}


def shim_pids(pod_id: str) -> list[int]:
    """Pids of containerd-shim-runc-v2 processes serving `pod_id`."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines()
            if "containerd-shim" in line and f"-id {pod_id}" in line]


@unittest.skipUnless(os.geteuid() == 0, "needs root: containerd, runc and the CRI plugin "
                                        "create namespaces, cgroups and overlay mounts")
class CriPodSandboxTest(unittest.TestCase):
    def setUp(self) -> None:
        self.t0 = time.monotonic()
        # Short path: containerd's sockets must fit AF_UNIX's 108 bytes.
        self.dir = tempfile.mkdtemp(prefix="shoal-cri-")
        self.ctrd = Containerd(self.dir, cri=True, sandbox_image=PAUSE_IMAGE).start()

    def tearDown(self) -> None:
        self.ctrd.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        print(f"\n{self.id().rsplit('.', 1)[-1]}: {time.monotonic() - self.t0:.2f} s")

    def tasks(self) -> dict[str, str]:
        """task id → status in CRI's namespace (`ctr tasks ls`)."""
        lines = self.ctrd.ctr("tasks", "ls", namespace=CRI_NAMESPACE).stdout.splitlines()[1:]
        return {f[0]: f[2] for f in (ln.split() for ln in lines) if len(f) >= 3}

    def test_run_list_stop_remove(self) -> None:
        c = self.ctrd
        pod = c.run_pod("trainer-0", "shoal-test", LABELS, uid="uid-trainer-0")
        self.assertRegex(pod, r"^[0-9a-f]{64}$")
        self.assertIn(PAUSE_IMAGE, c.images(namespace=CRI_NAMESPACE))

        pods = c.list_pods()
        self.assertEqual([p["id"] for p in pods], [pod])
        p = pods[0]
        self.assertEqual((p["name"], p["namespace"], p["uid"], p["attempt"]),
                         ("trainer-0", "shoal-test", "uid-trainer-0", 0))
        self.assertEqual(p["state"], "SANDBOX_READY")
        self.assertEqual(p["labels"].get("shoal.io/job"), "train")
        self.assertEqual(p["labels"].get("shoal.io/rank"), "0")
        self.assertEqual(self.tasks().get(pod), "RUNNING", "the pause task runs")
        self.assertTrue(shim_pids(pod))

        c.stop_pod(pod)
        (p,) = c.list_pods()
        self.assertEqual((p["id"], p["state"]), (pod, "SANDBOX_NOTREADY"))
        self.assertEqual(p["labels"].get("shoal.io/job"), "train")
        self.assertNotEqual(self.tasks().get(pod), "RUNNING")

        c.remove_pod(pod)
        self.assertEqual(c.list_pods(), [])
        self.assertEqual(shim_pids(pod), [])
        with open("/proc/self/mountinfo") as f:
            self.assertNotIn(pod, f.read(), "no mount of the sandbox remains (shm, rootfs)")

    def test_stop_removes_leftover_sandboxes(self) -> None:
        c = self.ctrd
        pods = [c.run_pod(f"w-{i}", "shoal-test", {"shoal.io/job": "train"}) for i in range(2)]
        listed = {p["id"]: p["state"] for p in c.list_pods()}
        self.assertEqual(listed, {pod: "SANDBOX_READY" for pod in pods})
        c.stop()
        for pod in pods:
            self.assertEqual(shim_pids(pod), [], f"no shim left for {pod}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
