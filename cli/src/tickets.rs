//! `turnstile tickets`: the connect-ticket key set. Each rotation step reads the
//! current set on stdin and writes the next on stdout, so it pipes between `aws secretsmanager
//! get-secret-value` and `put-secret-value` without the key set touching a file or a log:
//!
//! ```sh
//! aws secretsmanager get-secret-value --secret-id $SECRET --query SecretString --output text \
//!   | turnstile tickets stage \
//!   | aws secretsmanager put-secret-value --secret-id $SECRET --secret-string file:///dev/stdin
//! ```
//!
//! `stage` adds a key that verifies, `promote` makes it sign, `retire` drops the others; wait one
//! key cache period (`TURNSTILE_TICKET_KEYS_CACHE_SECS`, 300 s) between steps, and the longest
//! ticket lifetime too before `retire`. `ids` prints the key ids of a set, never its secrets.

use std::io::Read;

use clap::Subcommand;
use shared::ticket::KeySet;
use shared::{Error, Result};

pub(crate) type Args = crate::Nested<Cmd>;

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// Print a new one-key set (for a stack deployed without the template's generated secret).
    New,
    /// Rotation step 1: add a new key that verifies (the current first key still signs).
    Stage,
    /// Rotation step 2: the last key signs; the others still verify.
    Promote,
    /// Rotation step 3: keep only the signing key (tickets of the others are refused).
    Retire,
    /// Print the key ids of the set on stdin, first (signing) first; no secret is printed.
    Ids,
}

fn stdin_set() -> Result<KeySet> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| Error::Other(format!("reading the key set from stdin: {e}")))?;
    KeySet::parse_json(text.trim()).map_err(|e| Error::Other(e.to_string()))
}

pub async fn run(args: Args) -> Result<()> {
    let key_err = |e: shared::ticket::KeyError| Error::Other(e.to_string());
    let next = match args.command {
        Cmd::New => KeySet::generate("k1").map_err(key_err)?,
        Cmd::Stage => stdin_set()?.with_new_key().map_err(key_err)?,
        Cmd::Promote => stdin_set()?.promoted(),
        Cmd::Retire => stdin_set()?.retired(),
        Cmd::Ids => return crate::print_json(&stdin_set()?.ids()),
    };
    eprintln!("key ids, signing first: {}", next.ids().join(", "));
    println!("{}", next.to_json());
    Ok(())
}
