"""Registration with the kubelet: request contents, kubelet restarts, late kubelet, clean stop."""

from __future__ import annotations

from pathlib import Path

from devtools.fake_sysfs import GPU_BDFS, FakeBoard
from services.device_plugin.registration import endpoint_name
from tests.fixtures.fake_kubelet import FakeKubelet


def test_register_request_and_options(
    hgx_board: FakeBoard, fake_kubelet: FakeKubelet, make_settings, run_plugin
) -> None:
    run_plugin(make_settings(hgx_board, fabric_socket=""))
    conn = fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    (req,) = fake_kubelet.registrations
    assert req.version == "v1beta1"
    assert req.resource_name == "nvidia.com/gpu"
    assert req.endpoint == "gpucaas-nvidia.com_gpu.sock" == endpoint_name("nvidia.com/gpu")
    assert req.options.get_preferred_allocation_available and req.options.pre_start_required
    assert conn.options == req.options  # GetDevicePluginOptions agrees with the registration
    assert sorted(conn.health()) == list(GPU_BDFS)
    dev = conn.devices[GPU_BDFS[0]]
    assert [n.ID for n in dev.topology.nodes] == [0]
    assert [n.ID for n in conn.devices[GPU_BDFS[7]].topology.nodes] == [1]


def test_custom_resource_name(hgx_board: FakeBoard, fake_kubelet: FakeKubelet, make_settings, run_plugin) -> None:
    run_plugin(make_settings(hgx_board, fabric_socket="", resource_name="gpucaas.dev/h100"))
    conn = fake_kubelet.wait_for_plugin("gpucaas.dev/h100")
    assert conn.request.endpoint == "gpucaas-gpucaas.dev_h100.sock"


def test_kubelet_restart_makes_plugin_register_again(
    hgx_board: FakeBoard, fake_kubelet: FakeKubelet, make_settings, run_plugin
) -> None:
    p = run_plugin(make_settings(hgx_board, fabric_socket=""))
    fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    for n in (2, 3):
        fake_kubelet.restart()  # kubelet.sock recreated, plugin sockets wiped
        conn = fake_kubelet.wait_for_plugin("nvidia.com/gpu", registrations=n)
        assert sorted(conn.healthy()) == list(GPU_BDFS)
        alloc = fake_kubelet.admit("tenant-a", f"pod-{n}", "nvidia.com/gpu", 1)
        assert alloc.response.cdi_devices[0].name.startswith("nvidia.com/gpu=0000:")
    assert p.registrar.registrations == 3


def test_restart_without_socket_wipe_also_reregisters(
    hgx_board: FakeBoard, socket_dir: Path, make_settings, run_plugin
) -> None:
    kubelet = FakeKubelet(socket_dir / "device-plugins", wipe_on_restart=False).start()
    try:
        run_plugin(make_settings(hgx_board, fabric_socket=""))
        kubelet.wait_for_plugin("nvidia.com/gpu")
        kubelet.restart()
        conn = kubelet.wait_for_plugin("nvidia.com/gpu", registrations=2)
        assert len(conn.healthy()) == 8
    finally:
        kubelet.stop()


def test_plugin_started_before_kubelet_registers_when_it_appears(
    hgx_board: FakeBoard, socket_dir: Path, make_settings, run_plugin
) -> None:
    p = run_plugin(make_settings(hgx_board, fabric_socket=""))
    assert p.registrar.registrations == 0
    kubelet = FakeKubelet(socket_dir / "device-plugins").start()
    try:
        conn = kubelet.wait_for_plugin("nvidia.com/gpu")
        assert len(conn.healthy()) == 8
    finally:
        kubelet.stop()


def test_stale_socket_replaced_and_socket_removed_on_stop(
    hgx_board: FakeBoard, fake_kubelet: FakeKubelet, make_settings, run_plugin
) -> None:
    settings = make_settings(hgx_board, fabric_socket="")
    stale = settings.device_plugin_dir / "gpucaas-nvidia.com_gpu.sock"
    stale.write_text("left over by a crashed plugin")
    p = run_plugin(settings)
    fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    assert stale.is_socket()
    p.stop()
    assert not stale.exists()
    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    assert conn.wait_for(lambda c: c.stream_ended)


def test_a_kubelet_slow_to_answer_is_asked_again_without_restarting_the_server(
    hgx_board: FakeBoard, fake_kubelet: FakeKubelet, make_settings, run_plugin
) -> None:
    """After a kubelet restart the plugin serves anew once; a Register that then times out (the
    kubelet too loaded to answer) is retried as is. Restarting the server on every failed try
    dropped the connection the kubelet had just opened to it, again and again."""
    import os
    import socket

    from devtools.waiting import wait_for

    p = run_plugin(make_settings(hgx_board, fabric_socket=""))
    fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    fake_kubelet.stop()
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # accepts connections, never answers
    mute.bind(str(fake_kubelet.socket_path))
    mute.listen(16)
    tries: list[object] = []
    register = p.registrar.register
    p.registrar.register = lambda *a, **kw: (tries.append(1), register(*a, **kw))[1]  # type: ignore[method-assign]
    try:
        wait_for(lambda: p.registrar.socket_path.exists() and len(tries) >= 1, what="a first try at the mute kubelet")
        st = os.stat(p.registrar.socket_path)
        served = (st.st_ino, st.st_ctime_ns)  # inode numbers are reused: the change time tells
        wait_for(lambda: len(tries) >= 3, what="two more tries")
        st = os.stat(p.registrar.socket_path)
        assert (st.st_ino, st.st_ctime_ns) == served  # the same server all along
        assert p.registrar.registrations == 1
    finally:
        mute.close()
        fake_kubelet.socket_path.unlink(missing_ok=True)
    fake_kubelet.start()  # the kubelet answers again: the plugin registers
    conn = fake_kubelet.wait_for_plugin("nvidia.com/gpu", registrations=2)
    assert sorted(conn.healthy()) == list(GPU_BDFS)
