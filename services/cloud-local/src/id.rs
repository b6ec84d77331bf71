//! Disk ids of the local cloud: `vol-` and 32 lowercase hex digits. We generate them
//! and parse them on the way in, so an id is only ever joined into a path after it has
//! been proven to be one of ours.

use std::fmt;

use rand::RngCore;

const PREFIX: &str = "vol-";
const HEX_LEN: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DiskId(String);

impl DiskId {
    pub fn generate() -> Self {
        let mut bytes = [0u8; HEX_LEN / 2];
        rand::rng().fill_bytes(&mut bytes);
        let mut s = String::with_capacity(PREFIX.len() + HEX_LEN);
        s.push_str(PREFIX);
        for b in bytes {
            s.push_str(&format!("{b:02x}"));
        }
        Self(s)
    }

    /// `None` for anything that is not exactly an id we could have generated.
    pub fn parse(raw: &str) -> Option<Self> {
        let hex = raw.strip_prefix(PREFIX)?;
        let ok = hex.len() == HEX_LEN
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The backing file's name inside the disks directory.
    pub fn file_name(&self) -> String {
        format!("{}.img", self.0)
    }

    /// The inverse of [`DiskId::file_name`], for scanning the disks directory.
    pub fn from_file_name(name: &str) -> Option<Self> {
        Self::parse(name.strip_suffix(".img")?)
    }

    /// The name of the file that records what the disk is, beside it (`meta`).
    pub fn meta_file_name(&self) -> String {
        format!("{}.json", self.0)
    }
}

impl fmt::Display for DiskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_parse_and_are_distinct() {
        let a = DiskId::generate();
        let b = DiskId::generate();
        assert_ne!(a, b);
        assert_eq!(DiskId::parse(a.as_str()), Some(a.clone()));
        assert_eq!(DiskId::from_file_name(&a.file_name()), Some(a.clone()));
        // The metadata file beside a disk is never taken for its disk file.
        assert_eq!(DiskId::from_file_name(&a.meta_file_name()), None);
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            "",
            "vol-",
            "reallyfakevolumeid",
            "vol-../../../../etc/passwd000000000",
            "vol-0123456789abcdef0123456789ABCDEF",
            "vol-0123456789abcdef0123456789abcde",
            "vol-0123456789abcdef0123456789abcdef0",
            "vol-0123456789abcdef0123456789abcde/",
            "xol-0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(DiskId::parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            DiskId::from_file_name("vol-0123456789abcdef0123456789abcdef"),
            None
        );
    }
}
