//! Masks credentials in text that may reach a log or an error: URL passwords
//! (`https://user:pw@host`), query parameters and JSON or form fields whose name says
//! secret (`password`, `secret`, `token`, `access_token`, `X-Auth-Token`, …).

const SECRET_NAMES: &[&str] = &[
    "password",
    "passwd",
    "secret",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "x-auth-token",
    "x-subject-token",
    "authorization",
    "api_key",
    "apikey",
    "application_credential_secret",
    "client_secret",
];

const MASK: &str = "<redacted>";

/// `text` with every credential the rules above find replaced by `<redacted>`.
pub fn redact(text: &str) -> String {
    let text = url_passwords(text);
    let mut out = String::with_capacity(text.len());
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let hit = SECRET_NAMES
            .iter()
            .find_map(|name| lower[i..].starts_with(name).then_some(name.len()));
        // A name counts at a word start only ("tokenize" is a word of its own).
        let at_start = i == 0 || !is_word(bytes[i - 1]);
        match hit {
            Some(len) if at_start && !bytes.get(i + len).copied().is_some_and(is_word) => {
                out.push_str(&text[i..i + len]);
                i += len;
                // Skip a closing quote, spaces, then the separator (`=`, `:`).
                let mut j = i;
                while j < bytes.len() && matches!(bytes[j], b'"' | b'\'' | b' ') {
                    j += 1;
                }
                if j < bytes.len() && matches!(bytes[j], b'=' | b':') {
                    j += 1;
                    while j < bytes.len() && bytes[j] == b' ' {
                        j += 1;
                    }
                    out.push_str(&text[i..j]);
                    // The value: quoted up to its closing quote, else up to a delimiter.
                    let end = if j < bytes.len() && matches!(bytes[j], b'"' | b'\'') {
                        let q = bytes[j];
                        out.push(q as char);
                        j += 1;
                        let close = text[j..].find(q as char).map_or(bytes.len(), |k| j + k);
                        out.push_str(MASK);
                        close
                    } else {
                        let stop = text[j..]
                            .find(|c: char| {
                                c == '&' || c == ',' || c == '}' || c == ';' || c.is_whitespace()
                            })
                            .map_or(bytes.len(), |k| j + k);
                        // "Bearer abc": the scheme stays, the credential goes.
                        if text[j..stop].eq_ignore_ascii_case("bearer")
                            || text[j..stop].eq_ignore_ascii_case("basic")
                        {
                            out.push_str(&text[j..stop]);
                            out.push(' ');
                            let rest = stop + 1;
                            let end = text
                                .get(rest..)
                                .and_then(|r| {
                                    r.find(|c: char| c.is_whitespace() || c == ',' || c == '"')
                                })
                                .map_or(bytes.len(), |k| rest + k);
                            out.push_str(MASK);
                            i = end.min(bytes.len());
                            continue;
                        }
                        out.push_str(MASK);
                        stop
                    };
                    i = end;
                } else {
                    out.push_str(&text[i..j]);
                    i = j;
                }
            }
            _ => {
                let c = text[i..].chars().next().unwrap_or(' ');
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    out
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// `scheme://user:password@host` → `scheme://user:<redacted>@host`.
fn url_passwords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(k) = rest.find("://") {
        let (head, tail) = rest.split_at(k + 3);
        out.push_str(head);
        let authority_end = tail
            .find(|c: char| c == '/' || c.is_whitespace() || c == '"')
            .unwrap_or(tail.len());
        let authority = &tail[..authority_end];
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..=colon]);
                        out.push_str(MASK);
                    }
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[authority_end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn credentials_are_masked_wherever_they_hide() {
        let cases = [
            (
                r#"{"auth": {"password": "hunter2", "user": "k8s"}}"#,
                r#"{"auth": {"password": "<redacted>", "user": "k8s"}}"#,
            ),
            (
                "grant_type=password&username=admin&password=s3cr3t&scope=ovirt-app-api",
                "grant_type=password&username=admin&password=<redacted>&scope=ovirt-app-api",
            ),
            (
                "connect https://admin:pa55@engine.example/ovirt-engine/api failed",
                "connect https://admin:<redacted>@engine.example/ovirt-engine/api failed",
            ),
            (
                "X-Auth-Token: gAAAAAB-abc123 next",
                "X-Auth-Token: <redacted> next",
            ),
            (
                "Authorization: Bearer eyJhbGciOi.x.y",
                "Authorization: Bearer <redacted>",
            ),
            (
                r#"{"access_token":"tok","token_type":"bearer"}"#,
                r#"{"access_token":"<redacted>","token_type":"bearer"}"#,
            ),
            (
                r#"{"application_credential_secret": "abc"}"#,
                r#"{"application_credential_secret": "<redacted>"}"#,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(redact(input), want, "{input}");
        }
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        for text in [
            "volume 5d3c is in-use; tokenize the password-less path",
            "Quota exceeded for resources: ['gigabytes']",
            "https://keystone:5000/v3/auth/tokens",
            "ünïcode ✓ text",
        ] {
            assert_eq!(redact(text), text);
        }
    }
}
