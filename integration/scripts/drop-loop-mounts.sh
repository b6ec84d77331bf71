#!/bin/sh
# Run inside a mount namespace just made private (`unshare --mount`): unmounts there every
# mount of a loop device it copied from this machine's namespace. A private copy keeps such
# a device busy for as long as the namespace lives, whatever its owner unmounts here: CI's
# node-b, started beside the zVirt program's tests, held their disks past their stop (both
# failed, "left loop devices"); this machine's mounts share nothing, so not even a slave
# copy would see the unmount. No process we start in such a namespace needs another's loop
# device; its own mounts come after.
set -eu
for device in $(findmnt -rn -o SOURCE | sed -n 's/\[.*//; /^\/dev\/loop[0-9]*$/p' | sort -u); do
  umount -A -l "$device" || echo "drop-loop-mounts: $device stays mounted in this namespace" >&2
done
