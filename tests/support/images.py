"""The images the real-node tests run, built from this checkout and pushed under the names their jobs use.

Each is the rig's Debian base (python3) plus a layer with the training code. torch itself comes from the
node (kuberig's ``node/configs.py``): kuberig's ``.pth`` file (``NODE_PYTHON``) puts the node's read-only
site-packages on ``python3``'s path, as ``kube-rig load image`` does for a user's image.
"""

from __future__ import annotations

from pathlib import Path

from kuberig import Cluster
from kuberig.images.load import NODE_PYTHON
from tests.support.paths import GPT, INTEGRATION_SCRIPTS, MNIST, ROOT
from tests.support.servers import etcd_binary

# The image of Kubeflow's classic PyTorchJob example (tests/data/valid/kubeflow-mnist.yaml, unchanged): a
# plain torch.distributed MNIST script at the path and with the arguments that job uses.
KUBEFLOW_MNIST = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
# The image of Kubeflow's dist-mnist example (tests/data/valid/kubeflow-dist-mnist-gloo.yaml): the job gives only
# arguments, so the image's entrypoint runs the script (one epoch, as that example's script defaults to).
DIST_MNIST = "docker.io/kubeflow/pytorch-dist-mnist:latest"
# The image examples/mnist/job.yaml names (examples/mnist/Dockerfile builds the same for a real registry).
EXAMPLE_MNIST = "ghcr.io/torchjob/examples-mnist:0.1"
# The image examples/mnist/elasticjob.yaml names: the example with the elastic launcher as its entrypoint, as
# TorchElastic's images have it (the job gives only the launcher's args); and the etcd examples/mnist/etcd.yaml
# runs, the etcd 3.5 the tests build (tools/etcd-v2-build.sh), which serves the v2 API torchrun's etcd rendezvous
# speaks.
EXAMPLE_MNIST_ELASTIC = "ghcr.io/torchjob/examples-mnist-elastic:0.1"
ETCD = "quay.io/coreos/etcd:v3.5.35"
# The image examples/gpt/*.yaml name: the sharded example's scripts (its tokens are generated: nothing to fetch).
EXAMPLE_GPT = "ghcr.io/torchjob/examples-gpt:0.1"
# The integration tests' training scripts (tests/integration/scripts), with torchjob and torchrun.
TEST_SCRIPTS = "ghcr.io/torchjob/test-scripts:0.1"
TORCHRUN = {"/usr/local/bin/torchrun": b"#!/usr/bin/python3\nfrom torch.distributed.run import main\nmain()\n"}
TORCHJOB = {"/usr/local/lib/python3.11/dist-packages/torchjob": ROOT / "src" / "torchjob"}


def push_test_images(cluster: Cluster) -> None:
    cluster.push_image(
        KUBEFLOW_MNIST,
        {
            **NODE_PYTHON,
            "/opt/pytorch-mnist/mnist.py": MNIST / "train_plain.py",
            "/opt/pytorch-mnist/mnist_data.py": MNIST / "mnist_data.py",
            "/opt/pytorch-mnist/model.py": MNIST / "model.py",
            **TORCHJOB,  # for torchjob.io/warm-start's launcher (bench.real_node); the script never imports it
            **TORCHRUN,  # what pip writes for torch's console script: `render --to indexed-job` runs torchrun
        },
    )
    cluster.push_image(
        DIST_MNIST,
        {
            **NODE_PYTHON,
            "/opt/mnist/src/mnist.py": MNIST / "train_plain.py",
            "/opt/mnist/src/mnist_data.py": MNIST / "mnist_data.py",
            "/opt/mnist/src/model.py": MNIST / "model.py",
        },
        entrypoint=["python3", "/opt/mnist/src/mnist.py", "--epochs", "1"],
        workdir="/opt/mnist",
    )
    push_example_images(cluster)
    cluster.push_image(
        TEST_SCRIPTS, {**NODE_PYTHON, **TORCHJOB, **TORCHRUN, "/workspace": INTEGRATION_SCRIPTS}, workdir="/workspace"
    )


def push_example_images(cluster: Cluster) -> None:
    """The images ``examples/mnist/*.yaml`` and ``examples/gpt/*.yaml`` name, so that ``torchjob submit
    examples/mnist/job.yaml`` runs on the rig (and the ElasticJob example, with its etcd)."""
    # torchrun too, as the image examples/mnist/Dockerfile builds on has it: the TrainJob example runs under it.
    files: dict[str, Path | bytes] = {**NODE_PYTHON, **TORCHJOB, **TORCHRUN, "/workspace": MNIST}
    cluster.push_image(EXAMPLE_MNIST, files, workdir="/workspace")
    launcher = ["python3", "-m", "torch.distributed.run"]
    cluster.push_image(EXAMPLE_MNIST_ELASTIC, files, workdir="/workspace", entrypoint=launcher)
    cluster.push_image(EXAMPLE_GPT, {**NODE_PYTHON, **TORCHJOB, "/workspace": GPT}, workdir="/workspace")
    if etcd_binary().exists():  # built with the test servers (tools/bootstrap --test-servers)
        cluster.push_image(ETCD, {"/usr/local/bin/etcd": etcd_binary()})
