//! `doze-kafka users add`: a SCRAM credential written straight into a data
//! dir's meta.db, with the broker stopped (Kafka's `kafka-storage format
//! --add-scram` does the same before the first start). A running broker
//! takes users through AlterUserScramCredentials instead.
//!
//! The data dir's lock is taken first, as the broker does: while a broker
//! holds it this refuses to run, and a broker started meanwhile waits for
//! nothing, it fails on the lock.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use doze_core::security::scram::{Credential, Mechanism};
use doze_core::security::store;
use doze_core::MetaOp;

use crate::datadir::DataDir;
use crate::metastore::MetaStore;

/// The iterations of a credential made here: Kafka's minimum (and the
/// default of its tools), what every SCRAM client accepts.
pub const ITERATIONS: i32 = 4096;
/// Bytes of salt, from /dev/urandom (RFC 5802 asks for at least 16).
pub const SALT_BYTES: usize = 32;

/// What `add` did.
#[derive(Debug, PartialEq, Eq)]
pub struct Added {
    /// The user had a credential for this mechanism, now replaced.
    pub replaced: bool,
    pub meta_db: PathBuf,
}

/// Writes `user`'s credential for `mechanism`, made from `password` with a
/// fresh random salt. Fails if a broker holds the data dir.
pub fn add(
    data_dir: &Path,
    user: &str,
    mechanism: Mechanism,
    password: &[u8],
) -> anyhow::Result<Added> {
    check_user(user)?;
    if password.is_empty() {
        return Err(anyhow!("the password is empty"));
    }
    // Held until we return: no broker may open the dir meanwhile.
    let data = DataDir::open(data_dir)?;
    let salt = random_salt()?;
    let credential = Credential::from_password(mechanism, password, &salt, ITERATIONS);
    let MetaOp::Put { key, value } = store::put_credential(user, mechanism, &credential) else {
        unreachable!("put_credential is a Put");
    };

    let path = data.meta_db_path();
    let mut store = MetaStore::open(&data)?;
    let previous = store
        .db()
        .insert(key, value)
        .with_context(|| format!("cannot write {}", path.display()))?;
    store
        .checkpoint()
        .map_err(|e| anyhow!(e.0))
        .with_context(|| format!("cannot flush {}", path.display()))?;
    drop(store);
    Ok(Added {
        replaced: previous.is_some(),
        meta_db: path,
    })
}

/// A name Kafka's SCRAM accepts: not empty, no control characters.
fn check_user(user: &str) -> anyhow::Result<()> {
    if user.is_empty() {
        return Err(anyhow!("the user name is empty"));
    }
    if user.chars().any(char::is_control) {
        return Err(anyhow!("the user name {user:?} has a control character"));
    }
    Ok(())
}

fn random_salt() -> anyhow::Result<[u8; SALT_BYTES]> {
    let mut salt = [0u8; SALT_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut salt))
        .context("cannot read /dev/urandom")?;
    Ok(salt)
}

/// The password: the first line of `input`, without its line end.
pub fn read_password(input: impl std::io::BufRead) -> anyhow::Result<Vec<u8>> {
    let mut line = Vec::new();
    let mut input = input;
    input
        .read_until(b'\n', &mut line)
        .context("cannot read the password from stdin")?;
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
    if line.is_empty() {
        return Err(anyhow!("no password on stdin (one line is expected)"));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_is_the_first_line() {
        assert_eq!(read_password(&b"secret\nmore\n"[..]).unwrap(), b"secret");
        assert_eq!(read_password(&b"secret\r\n"[..]).unwrap(), b"secret");
        assert_eq!(read_password(&b"no newline"[..]).unwrap(), b"no newline");
        assert!(read_password(&b"\n"[..]).is_err());
        assert!(read_password(&b""[..]).is_err());
    }

    #[test]
    fn add_writes_a_credential_and_respects_the_lock() {
        let root = std::env::temp_dir().join(format!("doze-users-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let added = add(&root, "alice", Mechanism::Sha256, b"pw").unwrap();
        assert!(!added.replaced);
        let added = add(&root, "alice", Mechanism::Sha256, b"pw2").unwrap();
        assert!(added.replaced);

        let locked = DataDir::open(&root).unwrap();
        let err = add(&root, "bob", Mechanism::Sha512, b"pw").unwrap_err();
        assert!(err.to_string().contains("in use"), "{err}");
        drop(locked);

        // Read back as the broker's start-up opens it.
        let data = DataDir::open(&root).unwrap();
        let store = MetaStore::open(&data).unwrap();
        let db = store.db();
        let key = store::scram_key("alice", Mechanism::Sha256);
        let value = db.get(&key).unwrap().expect("stored");
        // Read back as the broker's boot reads it.
        let doze_core::meta_entry::MetaEntry::Scram {
            user,
            mechanism,
            credential: c,
        } = doze_core::meta_entry::decode_entry(&key, &value).unwrap()
        else {
            panic!("not a SCRAM entry");
        };
        assert_eq!((user.as_str(), mechanism), ("alice", Mechanism::Sha256));
        assert!(c.matches_password(Mechanism::Sha256, b"pw2"));
        assert!(!c.matches_password(Mechanism::Sha256, b"pw"));
        assert_eq!(c.iterations, ITERATIONS);
        assert_eq!(c.salt.len(), SALT_BYTES);
        assert!(db
            .get(store::scram_key("bob", Mechanism::Sha512))
            .unwrap()
            .is_none());
        drop(store);
        drop(data);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn bad_names_and_passwords() {
        let root = std::env::temp_dir().join("doze-users-test-never-created");
        assert!(add(&root, "", Mechanism::Sha256, b"pw").is_err());
        assert!(add(&root, "a\nb", Mechanism::Sha256, b"pw").is_err());
        assert!(add(&root, "alice", Mechanism::Sha256, b"").is_err());
        assert!(!root.exists());
    }
}
