"""Drives the zVirt engine simulator with the official oVirt Python SDK (ovirt-engine-sdk-python,
which speaks the engine's XML) through every call the Overcast provider makes, and checks that the
SDK parses every answer into the engine's types. Usage: drive.py URL USER PASSWORD VM_NAME [TEMPLATE VNIC_PROFILE_ID]: with a template and
a vNIC profile, also a VM's life as the CAPI provider leads it (clone, NIC, start, stop, remove).
Prints one line per step; exits non-zero on the first failure."""

import sys
import time

import ovirtsdk4 as sdk
import ovirtsdk4.types as types

url, user, password, vm_name = sys.argv[1:5]
template_name, profile_id = (sys.argv[5:7] + [None, None])[:2]


def step(what):
    print("ok:", what, flush=True)


def wait_vm(service, status, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        vm = service.get()
        if vm.status == status:
            return vm
        time.sleep(0.05)
    raise AssertionError("VM not %s after %ss" % (status, seconds))


def wait_disk(service, status, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        disk = service.get()
        if disk.status == status:
            return disk
        time.sleep(0.1)
    raise AssertionError("disk not %s after %ss" % (status, seconds))


connection = sdk.Connection(url=url, username=user, password=password, insecure=True)
try:
    connection.test(raise_exception=True)
    step("SSO login")
    system = connection.system_service()
    api = system.get()
    assert api.product_info.version.major == 4, api.product_info.version.major
    step("api root: engine %s" % api.product_info.version.full_version)

    vms = system.vms_service().list(search="name=%s" % vm_name)
    assert len(vms) == 1 and vms[0].name == vm_name, vms
    vm = vms[0]
    assert vm.status == types.VmStatus.UP, vm.status
    step("VM search: %s %s" % (vm.id, vm.status))
    vm_service = system.vms_service().vm_service(vm.id)
    got = vm_service.get()
    assert got.id == vm.id and got.cluster.id, got
    assert got.cpu.topology.sockets >= 1 and got.memory > 0
    step("VM get")
    devices = vm_service.reported_devices_service().list()
    ips = [ip.address for d in devices for ip in (d.ips or [])]
    assert "10.1.0.10" in ips, ips
    assert devices[0].type == types.ReportedDeviceType.NETWORK
    step("reported devices: %s" % ips)
    nics = vm_service.nics_service().list()
    assert nics and nics[0].name == "nic1" and nics[0].interface == types.NicInterface.VIRTIO, nics
    capped = system.vms_service().list(max=1)
    assert len(capped) == 1, capped
    step("NICs, and a listing capped by max")
    # The provider follows each cluster's data center inline (its zone's region).
    clusters = system.clusters_service().list(follow="data_center")
    assert clusters and clusters[0].name and clusters[0].data_center.name, clusters
    centers = system.data_centers_service().list()
    assert centers and centers[0].name
    kinds = system.instance_types_service().list()
    assert any(t.name == "Large" and t.memory == 8 << 30 for t in kinds), kinds
    step("clusters, data centers, instance types")

    # ... and each domain's data centers (where its disks can be attached).
    domains = system.storage_domains_service().list(follow="data_centers")
    data = [d for d in domains if d.type == types.StorageDomainType.DATA]
    assert data and data[0].available > 0 and data[0].storage.type, domains
    assert data[0].data_centers and data[0].data_centers[0].name, data[0].data_centers
    step("storage domains: %s" % [d.name for d in data])

    disks_service = system.disks_service()
    disk = disks_service.add(
        types.Disk(
            alias="sdk-disk",
            description='{"cluster":"sdk"}',
            provisioned_size=1 << 30,
            format=types.DiskFormat.COW,
            sparse=True,
            storage_domains=[types.StorageDomain(name=data[0].name)],
        )
    )
    assert disk.status == types.DiskStatus.LOCKED, disk.status
    step("disk create: %s %s" % (disk.id, disk.status))
    disk_service = disks_service.disk_service(disk.id)
    disk = wait_disk(disk_service, types.DiskStatus.OK)
    assert disk.provisioned_size == 1 << 30 and disk.format == types.DiskFormat.COW
    step("disk polled to ok")
    found = disks_service.list(search='alias="sdk-disk"')
    assert [d.id for d in found] == [disk.id], found
    step("disk search by alias")

    attachments = vm_service.disk_attachments_service()
    attachment = attachments.add(
        types.DiskAttachment(
            disk=types.Disk(id=disk.id),
            interface=types.DiskInterface.VIRTIO_SCSI,
            bootable=False,
            active=True,
        )
    )
    assert attachment.id == disk.id and attachment.interface == types.DiskInterface.VIRTIO_SCSI
    step("attach: active=%s" % attachment.active)
    attachment_service = attachments.attachment_service(disk.id)
    deadline = time.time() + 30
    while not attachment_service.get().active:
        assert time.time() < deadline, "attachment never active"
        time.sleep(0.1)
    assert [a.id for a in attachments.list()] == [disk.id]
    # `vms` only with all_content, as the engine gives it (the provider asks so).
    assert disk_service.get().vms is None
    assert [v.id for v in disk_service.get(all_content=True).vms] == [vm.id]
    listed = system.vms_service().list(follow="disk_attachments")
    assert [a.disk.id for v in listed if v.id == vm.id for a in v.disk_attachments] == [disk.id]
    step("attachment active; where it is attached: all_content, and the VMs' attachments")

    try:
        disk_service.remove()
        raise AssertionError("an attached disk was removed")
    except sdk.Error as e:
        assert e.code == 409, e.code
        step("remove of an attached disk: fault %s" % e.code)

    disk_service.update(types.Disk(provisioned_size=2 << 30))
    disk = wait_disk(disk_service, types.DiskStatus.OK)
    assert disk.provisioned_size == 2 << 30, disk.provisioned_size
    step("resize to 2 GiB")

    attachment_service.remove()
    assert attachments.list() == []
    step("detach (the disk stays: %s)" % disk_service.get().status)
    try:
        attachment_service.remove()
        raise AssertionError("a disk that is not attached was detached")
    except sdk.Error as e:
        assert e.code == 400, e.code
        step("detach of a disk that is not attached: fault %s" % e.code)

    try:
        system.vms_service().vm_service("6f1c2d3e-4a5b-4c7d-8e9f-0a1b2c3d4e5f").get()
        raise AssertionError("a VM that does not exist was found")
    except sdk.NotFoundError:
        step("a VM that does not exist: NotFoundError")

    disk_service.remove()
    deadline = time.time() + 30
    while True:
        try:
            disk_service.get()
        except sdk.NotFoundError:
            break
        assert time.time() < deadline, "disk never went"
        time.sleep(0.1)
    step("disk removed")

    if template_name:
        templates = system.templates_service().list(search="name=%s" % template_name)
        assert [t.name for t in templates] == [template_name], templates
        step("template search: %s" % templates[0].id)
        gib = 1 << 30
        made = system.vms_service().add(
            types.Vm(
                name="sdk-clone",
                cluster=types.Cluster(name="Default"),
                template=types.Template(name=template_name),
                type=types.VmType.HIGH_PERFORMANCE,
                memory=2 * gib,
                memory_policy=types.MemoryPolicy(ballooning=False, guaranteed=2 * gib, max=2 * gib),
                cpu=types.Cpu(topology=types.CpuTopology(sockets=2, cores=1, threads=1)),
                initialization=types.Initialization(
                    custom_script="#cloud-config\nruncmd: [\"echo '<&>'\"]\n", host_name="sdk-clone"
                ),
            ),
            clone=True,
        )
        assert made.status == types.VmStatus.IMAGE_LOCKED, made.status
        assert made.type == types.VmType.HIGH_PERFORMANCE and made.cpu.topology.sockets == 2, made
        step("clone from the template: %s %s" % (made.id, made.status))
        clone_service = system.vms_service().vm_service(made.id)
        wait_vm(clone_service, types.VmStatus.DOWN)
        boot = clone_service.disk_attachments_service().list()
        assert len(boot) == 1 and boot[0].bootable and boot[0].active, boot
        step("clone down, its bootable disk copied")
        nic = clone_service.nics_service().add(
            types.Nic(name="nic1", vnic_profile=types.VnicProfile(id=profile_id))
        )
        assert nic.name == "nic1" and nic.vnic_profile.id == profile_id, nic
        try:
            clone_service.nics_service().add(types.Nic(name="nic1", vnic_profile=types.VnicProfile(id=profile_id)))
            raise AssertionError("a second NIC of one name was added")
        except sdk.Error as e:
            assert e.code == 409, e.code
        step("NIC on the vNIC profile; a second of its name: fault 409")
        clone_service.start()
        wait_vm(clone_service, types.VmStatus.UP)
        step("started: up")
        try:
            clone_service.remove()
            raise AssertionError("a running VM was removed")
        except sdk.Error as e:
            assert e.code == 409, e.code
        clone_service.stop()
        wait_vm(clone_service, types.VmStatus.DOWN)
        clone_service.remove()
        try:
            clone_service.get()
            raise AssertionError("the removed VM is still there")
        except sdk.NotFoundError:
            step("stopped and removed (a running one: fault 409)")
finally:
    connection.close(logout=False)
print("all calls parsed", flush=True)
