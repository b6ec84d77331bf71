"""cinder-backup on ../shared/sim/openstack: Cinder's own BackupManager and POSIX backup
driver (python3-cinder), with only what needs a hypervisor's storage played.

The simulator's volumes hold no data (its volume driver is Cinder's FakeLoggingVolumeDriver),
so a volume's "device" here is a file, OVERCAST_BACKUP_DATA/<volume id>: the POSIX driver
reads a backup from it and writes a restore into it. A test writes a volume's file before
backing it up and reads the restored volume's after. A backup of a snapshot reads a
temporary volume Cinder makes from the snapshot (`backup-vol-<volume id>`): its file starts
as the volume's (the snapshot's data is what the volume held when the backup began).
"""
import os
import shutil

from cinder.backup import manager
from sqlalchemy import event
from sqlalchemy.engine import Engine

DATA = os.environ.get("OVERCAST_BACKUP_DATA", "/tmp/overcast-backup-data")
# A volume never written: 1 MiB of zeros, sparse (the driver reads the whole file).
EMPTY = 1 << 20
TEMPORARY = "backup-vol-"


class SimBackupManager(manager.BackupManager):
    def _attach_device(self, ctxt, backup_device, properties, is_snapshot=False):
        os.makedirs(DATA, exist_ok=True)
        path = os.path.join(DATA, backup_device.id)
        if not os.path.exists(path):
            name = getattr(backup_device, "display_name", None) or ""
            source = os.path.join(DATA, name[len(TEMPORARY):]) if name.startswith(TEMPORARY) else None
            if source and os.path.exists(source):
                shutil.copyfile(source, path)
            else:
                with open(path, "wb") as f:
                    f.truncate(EMPTY)
        return {"conn": {"data": {}}, "device": {"path": path}, "connector": None}

    def _detach_device(self, ctxt, attach_info, device, properties,
                       is_snapshot=False, force=False, ignore_errors=False):
        return None


def _connector_properties(*args, **kwargs):
    # This host's connector, which os-brick reads through privsep (refused here): nothing
    # is attached, so a fixed one serves.
    return {"platform": "x86_64", "os_type": "linux", "multipath": False,
            "initiator": "iqn.2026-12.dev.overcast:sim", "host": "ossim", "ip": "127.0.0.1"}


manager.volume_utils.brick_get_connector_properties = _connector_properties


# The simulator's Cinder keeps its database in one SQLite file that every service writes.
# A transaction oslo.db begins (its own `BEGIN`, deferred) that read first and writes later
# is refused at once ("database is locked", no wait) when another service wrote in between:
# a restore failed so, `error_restoring`, 9 times in 25 under the bench. This process's
# transactions take the write lock when they begin instead, and wait for it.
@event.listens_for(Engine, "before_cursor_execute", retval=True)
def _begin_immediate(conn, cursor, statement, parameters, context, executemany):
    if statement == "BEGIN":
        statement = "BEGIN IMMEDIATE"
    return statement, parameters
