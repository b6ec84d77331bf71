#!/usr/bin/env bash
# cinder-backup beside ../shared/sim/openstack (run after its ossim-up.sh, with the same
# OSSIM_STATE): Cinder's own backup service, its POSIX driver storing backups under
# $OSSIM_STATE/cinder/backups, the device attach played by overcast_backup.py (beside this
# script). Its pid file is in $OSSIM_STATE/pids, so ossim-down.sh stops it with the rest.
# Prints the export the backup tests read: the directory of the volumes' data files.
#
#   eval "$(OSSIM_STATE=/dev/shm/ossim integration/scripts/cinder-backup/up.sh)"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
STATE=${OSSIM_STATE:?set OSSIM_STATE to the state directory of ossim-up.sh}
[ -f "$STATE/etc/cinder.conf" ] || { echo "cinder-backup: no $STATE/etc/cinder.conf (run ossim-up.sh first)" >&2; exit 1; }
sim=$(cd "${OSSIM_DIR:-$here/../../../../shared/sim/openstack}" && pwd)
data=$STATE/backup-data
mkdir -p "$STATE/cinder/backups" "$data"
cat > "$STATE/etc/backup.conf" <<CONF
[DEFAULT]
backup_manager = overcast_backup.SimBackupManager
backup_driver = cinder.backup.drivers.posix.PosixBackupDriver
backup_posix_path = $STATE/cinder/backups
CONF
pidfile=$STATE/pids/cinder-backup.pid
since=$(date -u '+%Y-%m-%d %H:%M:%S')
if [ -f "$pidfile" ] && kill -0 -- "-$(cat "$pidfile")" 2>/dev/null; then
  echo "cinder-backup: already running ($pidfile)" >&2
else
  # In the background with every descriptor its own (a caller reading this script's
  # output, as .ci/run does with $(…), must not wait for the service to end).
  (
    cd "$STATE"
    OVERCAST_BACKUP_DATA=$data PYTHONPATH="$sim/pylib:$here" exec \
      setsid sh -c 'echo $$ > "$0"; exec "$@"' "$pidfile" /usr/bin/python3 -c \
      "import sys; sys.argv=['cinder-backup','--config-file','$STATE/etc/cinder.conf','--config-file','$STATE/etc/backup.conf','--log-file','$STATE/log/cinder-backup.log']; from cinder.cmd.backup import main; sys.exit(main())"
  ) > "$STATE/log/cinder-backup.out" 2>&1 < /dev/null &
fi
# Up once this run has reported to Cinder's database (the API schedules a backup only to a
# cinder-backup that reported within service_down_time; a row an earlier run left is not
# this one's report) and is still running.
for _ in $(seq 1 120); do
  n=$(/usr/bin/python3 - "$STATE/cinder/cinder.db" "$since" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=5)
print(db.execute("select count(*) from services where binary='cinder-backup' and not deleted"
                 " and not disabled and coalesce(updated_at, created_at) >= ?", (sys.argv[2],)).fetchone()[0])
PY
) || n=0
  if [ "$n" -ge 1 ] && kill -0 -- "-$(cat "$pidfile")" 2>/dev/null; then
    echo "export OVERCAST_TEST_CINDER_BACKUP_DATA=$data"
    exit 0
  fi
  sleep 0.5
done
echo "cinder-backup did not report within 60 s; its log:" >&2
tail -20 "$STATE/log/cinder-backup.log" "$STATE/log/cinder-backup.out" >&2 || true
exit 1
