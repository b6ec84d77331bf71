//! The one path a request is authorized for and forwarded to. A path is decoded and its
//! dot segments resolved *before* it is authorized (so `/metrics/../admin` and
//! `/metrics/%2e%2e/admin` are `/admin`, and are authorized as such), and what is
//! forwarded is exactly the path that was authorized, re-encoded. What cannot be
//! normalized without guessing — an encoded `/`, `\` or NUL inside a segment, invalid
//! percent-encoding, or `..` above the root — is refused.

use std::fmt::Write as _;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path is not absolute")]
    NotAbsolute,
    #[error("the path has invalid percent-encoding")]
    BadEncoding,
    #[error("the path encodes a separator or a NUL inside a segment")]
    EncodedSeparator,
    #[error("the path climbs above the root")]
    AboveRoot,
}

/// The normalized form of `raw` (a URI path without query): decoded segments, `.`
/// removed, `..` resolved, empty segments (`//`) collapsed; a trailing slash is kept.
pub fn normalize(raw: &str) -> Result<String, PathError> {
    let rest = raw.strip_prefix('/').ok_or(PathError::NotAbsolute)?;
    let mut segments: Vec<String> = Vec::new();
    let parts: Vec<&str> = rest.split('/').collect();
    let trailing = parts.len() > 1 && parts.last() == Some(&"");
    for part in parts {
        let segment = decode(part)?;
        match segment.as_str() {
            "" | "." => {}
            ".." => {
                if segments.pop().is_none() {
                    return Err(PathError::AboveRoot);
                }
            }
            _ => segments.push(segment),
        }
    }
    let mut out = String::with_capacity(raw.len());
    for s in &segments {
        out.push('/');
        encode(s, &mut out);
    }
    if out.is_empty() || trailing {
        out.push('/');
    }
    Ok(out)
}

fn decode(segment: &str) -> Result<String, PathError> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment.get(i + 1..i + 3).ok_or(PathError::BadEncoding)?;
            let b = u8::from_str_radix(hex, 16).map_err(|_| PathError::BadEncoding)?;
            if matches!(b, b'/' | b'\\' | 0) {
                return Err(PathError::EncodedSeparator);
            }
            out.push(b);
            i += 3;
        } else {
            if bytes[i] == b'\\' {
                // Some servers take a backslash for a separator: never let one path be
                // two.
                return Err(PathError::EncodedSeparator);
            }
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| PathError::BadEncoding)
}

/// RFC 3986 pchar: unreserved, sub-delims, ':' and '@' stay; everything else is encoded.
fn encode(segment: &str, out: &mut String) {
    for b in segment.bytes() {
        let keep = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'@'
            );
        if keep {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_authorized_as_what_they_reach() {
        for (raw, want) in [
            ("/metrics", "/metrics"),
            ("/", "/"),
            ("/metrics/", "/metrics/"),
            ("/metrics/../admin", "/admin"),
            ("/metrics/%2e%2e/admin", "/admin"),
            ("/metrics/%2E%2E/admin", "/admin"),
            ("/metrics/x/../../admin", "/admin"),
            ("/metrics/./x", "/metrics/x"),
            ("//metrics", "/metrics"),
            ("/metrics/%78", "/metrics/x"),
            ("/a%20b", "/a%20b"),
            ("/a:b@c", "/a:b@c"),
        ] {
            assert_eq!(normalize(raw).as_deref(), Ok(want), "{raw}");
        }
    }

    #[test]
    fn what_cannot_be_normalized_is_refused() {
        for (raw, err) in [
            ("metrics", PathError::NotAbsolute),
            ("/..", PathError::AboveRoot),
            ("/metrics/../../etc", PathError::AboveRoot),
            ("/metrics%2f..%2fadmin", PathError::EncodedSeparator),
            ("/metrics%5c..", PathError::EncodedSeparator),
            ("/metrics\\..\\admin", PathError::EncodedSeparator),
            ("/a%00b", PathError::EncodedSeparator),
            ("/a%zz", PathError::BadEncoding),
            ("/a%2", PathError::BadEncoding),
            ("/a%ff", PathError::BadEncoding),
        ] {
            assert_eq!(normalize(raw), Err(err), "{raw}");
        }
    }
}
