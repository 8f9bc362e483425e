//! The messages between the service and a session's zygote ([`crate::zygote`]), and between
//! the service and the supervisor of one command inside it.
//!
//! Both are `SOCK_SEQPACKET` Unix sockets (one message per packet, never merged or split).
//!
//! - The control socket (service → zygote): one [`Request`] per command, with the command's
//!   own socket and its output pipes attached (`SCM_RIGHTS`). The zygote answers only once,
//!   at start: [`READY`] and what Landlock enforced, or [`ERROR`] and why not.
//! - A command's socket (supervisor ↔ service): [`STARTED`] (the kernel attaches the
//!   supervisor's process id as the service sees it, `SCM_CREDENTIALS`), [`GO`] back when the
//!   service has put it in the command's `pids` cgroup, then [`EXIT`] or [`SIGNAL`] when the
//!   command ended, or [`ERROR`]. The service shutting its end down means "kill the command".
//!
//! A request is a flat list of `tag NUL value NUL` pairs: every value is a path, an argument or
//! an environment entry, none of which can hold a NUL byte (the kernel could not pass it to a
//! program), so no escaping is needed.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// The largest request the control socket carries (a command of up to `MAX_ARG_STRLEN`, its
/// environment and paths fit; the socket buffers take it in one packet).
pub const REQUEST_MAX: usize = 192 * 1024;

/// Zygote → service, once: the walls are up. Followed by ` landlock=<status> abi=<n>`.
pub const READY: &str = "ready";
/// Supervisor → service: the supervisor runs and waits for [`GO`] if it was asked to.
pub const STARTED: &str = "started";
/// Service → supervisor: start the command.
pub const GO: &str = "go";
/// Supervisor → service: the command exited with this code (` <code>`).
pub const EXIT: &str = "exit";
/// Supervisor → service: a signal ended the command (` <signal>`).
pub const SIGNAL: &str = "signal";
/// Either way: what could not be done (` <message>`).
pub const ERROR: &str = "error";

/// What each descriptor attached to a request is, in the order attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdRole {
    /// The command's socket (its supervisor's end).
    Socket,
    /// Standard output's write end.
    Stdout,
    /// Standard error's write end (absent: standard error goes into standard output).
    Stderr,
    /// Where the shell wrapper writes its final working directory (descriptor 3).
    Cwd,
}

impl FdRole {
    fn name(self) -> &'static str {
        match self {
            Self::Socket => "socket",
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
            Self::Cwd => "cwd",
        }
    }

    fn parse(name: &[u8]) -> Option<Self> {
        Some(match name {
            b"socket" => Self::Socket,
            b"stdout" => Self::Stdout,
            b"stderr" => Self::Stderr,
            b"cwd" => Self::Cwd,
            _ => return None,
        })
    }
}

/// One command for the zygote to start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// Where it starts.
    pub cwd: PathBuf,
    /// The program and its arguments.
    pub argv: Vec<OsString>,
    /// Its whole environment, `NAME=value` each.
    pub env: Vec<OsString>,
    /// Whether the supervisor waits for [`GO`] before it starts the command.
    pub wait_for_go: bool,
    /// The attached descriptors, in order.
    pub fds: Vec<FdRole>,
}

/// Why a request cannot be encoded or was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{0} contains a NUL byte, which no program can be given")]
    Nul(&'static str),
    #[error("the request is {0} bytes, more than the {REQUEST_MAX} a command may take; write long scripts to a file in the workspace and run that")]
    TooLarge(usize),
    #[error("malformed request: {0}")]
    Malformed(String),
}

impl Request {
    /// The request as one packet.
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let mut out = Vec::new();
        let mut field = |tag: &str, value: &[u8], what: &'static str| {
            if value.contains(&0) {
                return Err(WireError::Nul(what));
            }
            out.extend_from_slice(tag.as_bytes());
            out.push(0);
            out.extend_from_slice(value);
            out.push(0);
            Ok(())
        };
        field(
            "cwd",
            self.cwd.as_os_str().as_bytes(),
            "the working directory",
        )?;
        for arg in &self.argv {
            field("arg", arg.as_bytes(), "an argument")?;
        }
        for entry in &self.env {
            field("env", entry.as_bytes(), "an environment entry")?;
        }
        if self.wait_for_go {
            field("wait", b"1", "")?;
        }
        for role in &self.fds {
            field("fd", role.name().as_bytes(), "")?;
        }
        if out.len() > REQUEST_MAX {
            return Err(WireError::TooLarge(out.len()));
        }
        Ok(out)
    }

    /// Reads a packet back; anything unexpected is refused, never guessed at.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let malformed = |what: &str| WireError::Malformed(what.to_owned());
        let body = bytes
            .strip_suffix(&[0])
            .ok_or_else(|| malformed("it does not end with a NUL"))?;
        let mut parts = body.split(|&b| b == 0);
        let mut request = Self::default();
        let mut cwd = None;
        while let Some(tag) = parts.next() {
            let value = parts
                .next()
                .ok_or_else(|| malformed("a tag without a value"))?;
            match tag {
                b"cwd" if cwd.is_none() => cwd = Some(PathBuf::from(OsStr::from_bytes(value))),
                b"arg" => request.argv.push(OsString::from_vec(value.to_vec())),
                b"env" => {
                    if !value.contains(&b'=') {
                        return Err(malformed("an environment entry without ="));
                    }
                    request.env.push(OsString::from_vec(value.to_vec()));
                }
                b"wait" if value == b"1" => request.wait_for_go = true,
                b"fd" => {
                    let role = FdRole::parse(value).ok_or_else(|| malformed("an unknown fd"))?;
                    if request.fds.contains(&role) {
                        return Err(malformed("a descriptor given twice"));
                    }
                    request.fds.push(role);
                }
                _ => {
                    return Err(WireError::Malformed(format!(
                        "unexpected field {:?}",
                        String::from_utf8_lossy(tag)
                    )))
                }
            }
        }
        request.cwd = cwd.ok_or_else(|| malformed("no working directory"))?;
        if !request.cwd.is_absolute() {
            return Err(malformed("a relative working directory"));
        }
        if request.argv.is_empty() {
            return Err(malformed("no program"));
        }
        if !request.fds.contains(&FdRole::Socket) || !request.fds.contains(&FdRole::Stdout) {
            return Err(malformed("no socket or no standard output"));
        }
        Ok(request)
    }
}

/// How a command ended, as the supervisor reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl Exit {
    pub const KILLED: Self = Self {
        code: None,
        signal: Some(libc::SIGKILL),
    };

    pub fn message(self) -> String {
        match (self.code, self.signal) {
            (_, Some(signal)) => format!("{SIGNAL} {signal}"),
            (Some(code), None) => format!("{EXIT} {code}"),
            (None, None) => format!("{SIGNAL} {}", libc::SIGKILL),
        }
    }

    pub fn parse(message: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(message).ok()?;
        let (word, number) = text.split_once(' ')?;
        let number: i32 = number.parse().ok()?;
        match word {
            EXIT => Some(Self {
                code: Some(number),
                signal: None,
            }),
            SIGNAL => Some(Self {
                code: None,
                signal: Some(number),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn no_nul() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(1u8..=255, 0..40)
    }

    proptest! {
        #[test]
        fn requests_round_trip(
            cwd in no_nul(),
            argv in proptest::collection::vec(no_nul(), 1..5),
            env in proptest::collection::vec((no_nul(), no_nul()), 0..5),
            wait in any::<bool>(),
            merged in any::<bool>(),
        ) {
            let mut cwd_bytes = b"/".to_vec();
            cwd_bytes.extend(cwd);
            let mut fds = vec![FdRole::Socket, FdRole::Stdout];
            if !merged {
                fds.push(FdRole::Stderr);
            }
            let request = Request {
                cwd: PathBuf::from(OsString::from_vec(cwd_bytes)),
                argv: argv.into_iter().map(OsString::from_vec).collect(),
                env: env
                    .into_iter()
                    .map(|(mut k, v)| {
                        k.retain(|&b| b != b'=');
                        k.push(b'=');
                        k.extend(v);
                        OsString::from_vec(k)
                    })
                    .collect(),
                wait_for_go: wait,
                fds,
            };
            let bytes = request.encode().unwrap();
            prop_assert_eq!(Request::parse(&bytes).unwrap(), request);
        }

        #[test]
        fn garbage_is_refused_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Request::parse(&bytes);
            let _ = Exit::parse(&bytes);
        }
    }

    #[test]
    fn a_nul_in_a_value_is_refused_when_encoding() {
        let request = Request {
            cwd: "/w".into(),
            argv: vec![OsString::from_vec(b"a\0b".to_vec())],
            fds: vec![FdRole::Socket, FdRole::Stdout],
            ..Request::default()
        };
        assert_eq!(request.encode(), Err(WireError::Nul("an argument")));
    }

    #[test]
    fn incomplete_requests_are_refused() {
        for bad in [
            &b""[..],
            b"cwd\0/w\0",
            b"cwd\0/w\0arg\0true\0fd\0stdout\0",
            b"cwd\0w\0arg\0true\0fd\0socket\0fd\0stdout\0",
            b"cwd\0/w\0arg\0true\0fd\0socket\0fd\0socket\0fd\0stdout\0",
            b"cwd\0/w\0arg\0true\0env\0NOEQUALS\0fd\0socket\0fd\0stdout\0",
            b"cwd\0/w\0arg\0true\0what\0x\0fd\0socket\0fd\0stdout\0",
            b"cwd\0/w\0arg",
        ] {
            assert!(
                Request::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn exits_round_trip() {
        for exit in [
            Exit {
                code: Some(3),
                signal: None,
            },
            Exit {
                code: None,
                signal: Some(15),
            },
        ] {
            assert_eq!(Exit::parse(exit.message().as_bytes()), Some(exit));
        }
        assert_eq!(Exit::parse(b"exit x"), None);
        assert_eq!(Exit::parse(b"started"), None);
    }
}
