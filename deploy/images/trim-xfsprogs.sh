# Run inside the csi image's root after xfsprogs is installed (build.sh's base and
# Dockerfile.csi's own install both run it). xfsprogs depends on python3 and libicu72 for
# xfs_scrub and xfs_scrub_all alone, which the node plugin never runs (it runs mkfs.xfs
# and xfs_growfs, which link neither). The scrubber goes, python3 and ICU go (dpkg told
# to forget xfsprogs' dependency: nothing installs packages in the image), then each
# library only they pulled in, once no installed package depends on it any more.
set -e
rm -f /usr/sbin/xfs_scrub /usr/sbin/xfs_scrub_all /usr/lib/systemd/system/xfs_scrub*
installed() { dpkg-query -W -f '${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }
for p in python3 python3-minimal python3.11 python3.11-minimal libpython3-stdlib \
         libpython3.11-minimal libpython3.11-stdlib libicu72; do
  if installed "$p"; then dpkg --purge --force-depends "$p" >/dev/null 2>&1; fi
done
# What python3 alone brought; each purged only when nothing installed names it.
for pass in 1 2 3; do
  for p in media-types mime-support tzdata libsqlite3-0 libreadline8 readline-common \
           libexpat1 libmpdec3 libffi8 libncursesw6 libnsl2 libtirpc3 libtirpc-common \
           libdb5.3 libbz2-1.0 libcrypt1 libssl3 libgssapi-krb5-2 libkrb5-3 \
           libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2; do
    installed "$p" || continue
    if dpkg-query -W -f '${db:Status-Status} ${Depends} ${Pre-Depends}\n' \
         | grep '^installed ' | grep -qE "(^|[ ,|])$p([ :,(]|$)"; then
      continue
    fi
    dpkg --purge "$p" >/dev/null 2>&1 || true
  done
done
