"""What the sandbox finds at start (process/sandbox/detect.py) with its probes faked, the layers a
phase gets from that (phase_sandbox._initial_layers), and how each missing layer is reported and,
under ``required``, refused."""

from __future__ import annotations

import pytest

from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.process.sandbox import detect as detect_module
from helix_runner.process.sandbox.detect import LAYERS, SandboxBroken, detect, says_unavailable
from helix_runner.process.sandbox.phase_sandbox import Layers, Sandbox, _initial_layers


class Host:
    """A faked host: which probes succeed, and what each said."""

    def __init__(self, monkeypatch, *, bwrap="/usr/bin/bwrap", userns=True, bwrap_works=True, abi=7,
                 libseccomp=True, seccomp_kernel=True, userns_says=(3, "errno 1 Operation not permitted"),
                 bwrap_says="bwrap: setting up uid map: Permission denied", seccomp_error=None):
        self.calls: list[list[str]] = []
        self.userns, self.bwrap_works = userns, bwrap_works
        self.userns_says, self.bwrap_says = userns_says, bwrap_says
        monkeypatch.setattr(detect_module, "_run", self.run)
        monkeypatch.setattr(detect_module, "_offers", lambda bwrap, option: True)
        monkeypatch.setattr(detect_module.shutil, "which", lambda name: bwrap)
        monkeypatch.setattr(detect_module.landlock, "abi", lambda: abi)
        monkeypatch.setattr(detect_module, "_seccomp_in_kernel", lambda: seccomp_kernel)
        import helix_runner.process.sandbox.seccomp_filter as seccomp_filter

        if not libseccomp:  # the module's import fails where libseccomp2 is missing (pyseccomp loads it)
            monkeypatch.delattr(seccomp_filter, "compile_filter")
        if seccomp_error is not None:
            def broken(**_):
                raise seccomp_error

            monkeypatch.setattr(seccomp_filter, "compile_filter", broken)

    def run(self, argv: list[str]) -> tuple[int, str]:
        self.calls.append(argv)
        if "-c" in argv:  # the user + network namespace probe
            return (0, "") if self.userns else self.userns_says
        if argv[-1] == "--version":
            return 0, "bubblewrap 0.8.0"
        return (0, "") if self.bwrap_works else (1, self.bwrap_says)


def test_a_host_that_allows_everything(monkeypatch):
    Host(monkeypatch)
    support = detect()
    assert (support.bwrap, support.bwrap_version, support.userns, support.landlock_abi, support.seccomp) == (
        "/usr/bin/bwrap", "0.8.0", True, 7, True)
    assert support.notes == ()


def test_no_bubblewrap_installed(monkeypatch):
    Host(monkeypatch, bwrap=None)
    support = detect()
    assert support.bwrap is None and support.userns
    assert support.note("namespaces") == "bubblewrap (bwrap) is not installed"


def test_no_user_namespaces_takes_bubblewrap_and_the_private_network(monkeypatch):
    host = Host(monkeypatch, userns=False)
    support = detect()
    assert support.bwrap is None and not support.userns
    assert support.note("network") == "no new user and network namespace: Operation not permitted"
    assert "user namespaces" in support.note("namespaces")
    assert not any(call[0] == "/usr/bin/bwrap" for call in host.calls)  # not even tried


def test_bubblewrap_that_cannot_build_a_sandbox(monkeypatch):
    Host(monkeypatch, bwrap_works=False)
    support = detect()
    assert support.bwrap is None and support.userns
    assert support.note("namespaces") == "bubblewrap cannot build a sandbox here: bwrap: setting up uid map: Permission denied"


def test_no_landlock(monkeypatch):
    Host(monkeypatch, abi=0)
    support = detect()
    assert support.landlock_abi == 0 and "Landlock" in support.note("landlock")


@pytest.mark.parametrize(("libseccomp", "kernel", "why"), [(False, True, "libseccomp is not installed"),
                                                         (True, False, "the kernel has no seccomp filter support")])
def test_no_seccomp(monkeypatch, libseccomp, kernel, why):
    Host(monkeypatch, libseccomp=libseccomp, seccomp_kernel=kernel)
    support = detect()
    assert not support.seccomp and support.note("seccomp").startswith(why)


# -- `auto` degrades a layer only when the host lacks it ------------------------------------------


@pytest.mark.parametrize("says", [(3, "errno 28 No space left on device"), (3, "errno 22 Invalid argument"),
                                  (3, "errno 13 Permission denied")])
def test_user_namespaces_refused_by_the_kernel_are_unavailable(monkeypatch, says):
    Host(monkeypatch, userns=False, userns_says=says)
    assert not detect().userns


@pytest.mark.parametrize("says", [(3, "errno 2 No such file or directory"),
                                  (1, "Traceback...\nModuleNotFoundError: No module named 'sandbox'")])
def test_a_user_namespace_check_that_fails_otherwise_stops_the_server(monkeypatch, says):
    Host(monkeypatch, userns=False, userns_says=says)
    with pytest.raises(SandboxBroken, match="the check for user namespaces failed"):
        detect()


def test_bubblewrap_failing_for_another_reason_stops_the_server(monkeypatch):
    Host(monkeypatch, bwrap_works=False, bwrap_says="bwrap: Can't find source path /x: No such file or directory")
    with pytest.raises(SandboxBroken, match="No such file or directory"):
        detect()


def test_libseccomp_refusing_the_filter_stops_the_server(monkeypatch):
    Host(monkeypatch, seccomp_error=ValueError("unknown syscall 'io_uring_setup'"))
    with pytest.raises(SandboxBroken, match="libseccomp could not compile"):
        detect()


def test_what_says_unavailable():
    assert says_unavailable("bwrap: setting up uid map: Permission denied")
    assert says_unavailable("landlock syscall 444: Function not implemented")
    assert says_unavailable("prctl(PR_SET_NO_NEW_PRIVS): Operation not permitted")
    assert not says_unavailable("/data/sandbox/seccomp/seccomp-userns.bpf: No such file or directory")
    assert not says_unavailable("exit 1")


def test_layers_turned_off_by_configuration_are_not_probed(monkeypatch):
    host = Host(monkeypatch)
    support = detect(frozenset({"namespaces", "network"}))
    assert support.bwrap is None and not support.userns
    assert support.note("namespaces") == support.note("network") == "turned off by configuration (sandbox_skip_layers)"
    assert host.calls == []  # neither the namespace probe nor bubblewrap ran


# -- the layers a phase gets from what was found -------------------------------------------------


def layers_of(monkeypatch, egress=(8080,), note="", **host) -> Layers:
    Host(monkeypatch, **host)
    return _initial_layers(detect(), egress, note)


def test_every_layer(monkeypatch):
    lay = layers_of(monkeypatch)
    assert (bool(lay.bwrap), lay.netns, lay.tcp_rules, lay.landlock_abi, lay.seccomp) == (True, True, False, 7, True)


def test_without_user_namespaces_landlock_tcp_rules_are_the_network_boundary(monkeypatch):
    lay = layers_of(monkeypatch, userns=False)
    assert (lay.bwrap, lay.netns, lay.tcp_rules) == (None, False, True)


@pytest.mark.parametrize("host", [{"userns": False, "abi": 3}, {"userns": False, "libseccomp": False}])
def test_without_user_namespaces_nor_tcp_rules_there_is_no_network_layer(monkeypatch, host):
    lay = layers_of(monkeypatch, **host)
    assert not lay.netns and not lay.tcp_rules and "network" in lay.notes


def test_a_phase_that_must_reach_the_internet_gets_no_network_layer(monkeypatch):
    lay = layers_of(monkeypatch, egress=None, note="the CLI reaches the model API directly")
    assert not lay.netns and not lay.tcp_rules and bool(lay.bwrap)
    assert lay.notes["network"] == "the CLI reaches the model API directly"


# -- reports and `required` ------------------------------------------------------------------------


def sandbox(tmp_path, setting: str, lay: Layers) -> Sandbox:
    return Sandbox(setting, lay, data_dir=tmp_path, egress_ports=(8080,))


FULL = Layers(bwrap="/usr/bin/bwrap", netns=True, landlock_abi=7, seccomp=True)
WITHOUT = {
    "namespaces": Layers(bwrap=None, netns=True, landlock_abi=7, seccomp=True, notes={"namespaces": "no bwrap"}),
    "network": Layers(bwrap="/usr/bin/bwrap", netns=False, landlock_abi=7, seccomp=True, notes={"network": "no net"}),
    "landlock": Layers(bwrap="/usr/bin/bwrap", netns=True, landlock_abi=0, seccomp=True, notes={"landlock": "no ll"}),
    "seccomp": Layers(bwrap="/usr/bin/bwrap", netns=True, landlock_abi=7, seccomp=False, notes={"seccomp": "no sc"}),
}


def test_the_report_lists_every_layer_with_what_it_does(tmp_path):
    report = sandbox(tmp_path, "auto", FULL).report_layers()
    assert [layer.name for layer in report] == list(LAYERS)
    assert all(layer.active for layer in report)
    assert "PID namespace" in report[0].detail and "8080" in report[1].detail and "ABI 7" in report[2].detail


@pytest.mark.parametrize("missing", LAYERS)
def test_required_refuses_naming_each_missing_layer(tmp_path, missing):
    lay = WITHOUT[missing]
    assert sandbox(tmp_path, "auto", lay).refusal() is None  # auto runs phases with what there is
    refused = sandbox(tmp_path, "required", lay).refusal()
    assert isinstance(refused, RunnerError)
    assert refused.kind is ErrorKind.FAILED_PRECONDITION and refused.reason == "SANDBOX_UNAVAILABLE"
    assert refused.metadata["layer"] == refused.metadata["layers"] == missing
    assert refused.metadata["detail"] == refused.metadata[f"{missing}_detail"] == lay.notes[missing]
    assert f"its {missing} layer is unavailable" in refused.message and lay.notes[missing] in refused.message
    report = {layer.name: layer for layer in sandbox(tmp_path, "required", lay).report_layers()}
    assert not report[missing].active and report[missing].detail == lay.notes[missing]


def test_required_names_every_missing_layer(tmp_path):
    lay = Layers(bwrap=None, netns=False, landlock_abi=7, seccomp=False,
                 notes={"namespaces": "no bwrap", "network": "no net", "seccomp": "no sc"})
    refused = sandbox(tmp_path, "required", lay).refusal()
    assert refused.message == ("the sandbox is required but its namespaces, network and seccomp layers are "
                               "unavailable on this server: namespaces: no bwrap; network: no net; seccomp: no sc")
    assert refused.metadata["layers"] == "namespaces,network,seccomp" and refused.metadata["layer"] == "namespaces"
    assert refused.metadata["network_detail"] == "no net"


def test_required_with_every_layer_refuses_nothing(tmp_path):
    assert sandbox(tmp_path, "required", FULL).refusal() is None


def test_required_refuses_only_the_layers_it_requires(tmp_path):
    lay = WITHOUT["namespaces"]  # the Landlock-only Kubernetes base requires network, landlock and seccomp
    base = Sandbox("required", lay, data_dir=tmp_path, egress_ports=(8080,),
                   required_layers=("network", "landlock", "seccomp"))
    assert base.refusal() is None
    lay = WITHOUT["seccomp"]
    refused = Sandbox("required", lay, data_dir=tmp_path, egress_ports=(8080,),
                      required_layers=("network", "landlock", "seccomp")).refusal()
    assert refused is not None and refused.metadata["layers"] == "seccomp"
