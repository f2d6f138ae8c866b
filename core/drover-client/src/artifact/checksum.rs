//! go-getter's checksums: `type:hex` with type md5, sha1, sha256 or sha512, or a bare hex value
//! whose type is guessed from its length (the form go-getter accepts in a URL's `?checksum=`).

use std::io::Read;
use std::path::Path;

use md5::Md5;
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha512};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashKind {
    Md5,
    Sha1,
    Sha256,
    Sha512,
}

impl HashKind {
    fn from_name(name: &str) -> Option<HashKind> {
        Some(match name {
            "md5" => HashKind::Md5,
            "sha1" => HashKind::Sha1,
            "sha256" => HashKind::Sha256,
            "sha512" => HashKind::Sha512,
            _ => return None,
        })
    }

    /// Digest length in bytes.
    fn len(self) -> usize {
        match self {
            HashKind::Md5 => 16,
            HashKind::Sha1 => 20,
            HashKind::Sha256 => 32,
            HashKind::Sha512 => 64,
        }
    }

    /// The Go type go-getter names at the end of its mismatch message (`%T` of the hash).
    fn go_type(self) -> &'static str {
        match self {
            HashKind::Md5 => "*md5.digest",
            HashKind::Sha1 => "*sha1.digest",
            HashKind::Sha256 => "*sha256.digest",
            HashKind::Sha512 => "*sha512.digest",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChecksumError {
    #[error("unsupported checksum type: {0}")]
    UnsupportedType(String),
    /// go-getter's `file:URL` form (a checksum file to fetch) is not implemented.
    #[error("checksum files (\"file:\" checksums) are not supported by Drover: {0}")]
    ChecksumFile(String),
    #[error("invalid checksum: {0}")]
    InvalidHex(String),
    #[error("invalid {kind} checksum: {value}")]
    WrongLength { kind: String, value: String },
    #[error("unknown checksum type for a value of {0} hex characters")]
    CannotGuess(usize),
    #[error(
        "Checksums did not match for {file}.\nExpected: {expected}\nGot: {got}\n{go_type}",
        go_type = kind.go_type()
    )]
    Mismatch {
        file: String,
        kind: HashKind,
        expected: String,
        got: String,
    },
    #[error("reading {file} to checksum it: {reason}")]
    Read { file: String, reason: String },
}

/// An expected digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checksum {
    pub kind: HashKind,
    pub value: Vec<u8>,
}

impl Checksum {
    /// Parses `type:hex`, or a bare hex value typed by its length as go-getter does.
    pub fn parse(text: &str) -> Result<Checksum, ChecksumError> {
        let text = text.trim();
        let (kind, value) = match text.split_once(':') {
            Some(("file", rest)) => return Err(ChecksumError::ChecksumFile(rest.to_string())),
            Some((name, value)) => (
                HashKind::from_name(name)
                    .ok_or_else(|| ChecksumError::UnsupportedType(name.to_string()))?,
                value,
            ),
            None => {
                let kind = match text.len() {
                    32 => HashKind::Md5,
                    40 => HashKind::Sha1,
                    64 => HashKind::Sha256,
                    128 => HashKind::Sha512,
                    n => return Err(ChecksumError::CannotGuess(n)),
                };
                (kind, text)
            }
        };
        let bytes = hex::decode(value).map_err(|e| ChecksumError::InvalidHex(e.to_string()))?;
        if bytes.len() != kind.len() {
            return Err(ChecksumError::WrongLength {
                kind: format!("{kind:?}").to_lowercase(),
                value: value.to_string(),
            });
        }
        Ok(Checksum { kind, value: bytes })
    }

    /// Hashes what `reader` yields and compares; `file` names it in the error.
    pub fn verify(&self, mut reader: impl Read, file: &str) -> Result<(), ChecksumError> {
        let mut hasher = Hasher::new(self.kind);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = reader.read(&mut buf).map_err(|e| ChecksumError::Read {
                file: file.to_string(),
                reason: e.to_string(),
            })?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        let got = hasher.finish();
        if got != self.value {
            return Err(ChecksumError::Mismatch {
                file: file.to_string(),
                kind: self.kind,
                expected: hex::encode(&self.value),
                got: hex::encode(got),
            });
        }
        Ok(())
    }

    /// Checks the file at `path`.
    pub fn verify_file(&self, path: &Path) -> Result<(), ChecksumError> {
        let file = std::fs::File::open(path).map_err(|e| ChecksumError::Read {
            file: path.display().to_string(),
            reason: e.to_string(),
        })?;
        self.verify(file, &path.display().to_string())
    }
}

enum Hasher {
    Md5(Md5),
    Sha1(Sha1),
    Sha256(Sha256),
    Sha512(Sha512),
}

impl Hasher {
    fn new(kind: HashKind) -> Hasher {
        match kind {
            HashKind::Md5 => Hasher::Md5(Md5::new()),
            HashKind::Sha1 => Hasher::Sha1(Sha1::new()),
            HashKind::Sha256 => Hasher::Sha256(Sha256::new()),
            HashKind::Sha512 => Hasher::Sha512(Sha512::new()),
        }
    }

    fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Md5(h) => h.update(data),
            Hasher::Sha1(h) => h.update(data),
            Hasher::Sha256(h) => h.update(data),
            Hasher::Sha512(h) => h.update(data),
        }
    }

    fn finish(self) -> Vec<u8> {
        match self {
            Hasher::Md5(h) => h.finalize().to_vec(),
            Hasher::Sha1(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
            Hasher::Sha512(h) => h.finalize().to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELLO_MD5: &str = "5d41402abc4b2a76b9719d911017c592";
    const HELLO_SHA1: &str = "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d";
    const HELLO_SHA256: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    #[test]
    fn typed_checksums_of_each_kind_verify_the_right_content() {
        for text in [
            format!("md5:{HELLO_MD5}"),
            format!("sha1:{HELLO_SHA1}"),
            format!("sha256:{HELLO_SHA256}"),
        ] {
            let c = Checksum::parse(&text).unwrap();
            assert_eq!(c.verify(&b"hello"[..], "f"), Ok(()), "{text}");
            assert!(c.verify(&b"hellO"[..], "f").is_err(), "{text}");
        }
        let sha512 = hex::encode(Sha512::digest(b"hello"));
        let c = Checksum::parse(&format!("sha512:{sha512}")).unwrap();
        assert_eq!(c.kind, HashKind::Sha512);
        assert_eq!(c.verify(&b"hello"[..], "f"), Ok(()));
    }

    #[test]
    fn bare_hex_values_are_typed_by_their_length() {
        assert_eq!(Checksum::parse(HELLO_MD5).unwrap().kind, HashKind::Md5);
        assert_eq!(Checksum::parse(HELLO_SHA1).unwrap().kind, HashKind::Sha1);
        assert_eq!(
            Checksum::parse(HELLO_SHA256).unwrap().kind,
            HashKind::Sha256
        );
        assert_eq!(Checksum::parse("abcd"), Err(ChecksumError::CannotGuess(4)));
    }

    #[test]
    fn malformed_checksums_are_refused_with_go_getters_words() {
        assert_eq!(
            Checksum::parse("crc32:00").unwrap_err().to_string(),
            "unsupported checksum type: crc32"
        );
        assert!(
            Checksum::parse("md5:zz")
                .unwrap_err()
                .to_string()
                .starts_with("invalid checksum: ")
        );
        assert_eq!(
            Checksum::parse("md5:00").unwrap_err().to_string(),
            "invalid md5 checksum: 00"
        );
        assert!(matches!(
            Checksum::parse("file:http://x/sums"),
            Err(ChecksumError::ChecksumFile(_))
        ));
    }

    #[test]
    fn a_mismatch_names_the_file_and_both_digests() {
        let c = Checksum::parse(&format!("md5:{HELLO_MD5}")).unwrap();
        let e = c.verify(&b""[..], "local/f").unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "Checksums did not match for local/f.\nExpected: {HELLO_MD5}\nGot: d41d8cd98f00b204e9800998ecf8427e\n*md5.digest"
            )
        );
    }
}
