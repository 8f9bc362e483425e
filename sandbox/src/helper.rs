//! The program that runs first inside bubblewrap: it sets the resource limits and Landlock on
//! itself, then replaces itself with the command.
//!
//! Landlock has to be applied here, after bubblewrap has built the mounts: a process in a
//! Landlock domain may not mount anything, so restricting bubblewrap itself would stop it from
//! building the sandbox. Its command line is an internal protocol between [`crate::Sandbox`]
//! and this helper, not a user interface.
//!
//! ```text
//! switchboard-sandbox-exec [--data N] [--cpu N] [--nproc N] [--fsize N] [--nofile N]
//!     [--write PATH]... [--no-tcp] [--report] -- PROGRAM ARGS...
//! switchboard-sandbox-exec [the same limits and walls] --zygote
//! ```
//!
//! `--report` prints one line, `landlock=<status> abi=<n>`, on standard error before running
//! the program (the probe reads it). A failure to apply a wall ends the helper with exit code
//! [`HELPER_FAILED`] and a message, and the command never runs.
//!
//! `--zygote` puts the helper itself under Landlock and then serves a session's commands on
//! descriptor 3 (the zygote of a [`crate::SessionSandbox`]): each command gets the limits and a Landlock layer of
//! its own before it runs.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

/// The exit code when the helper could not set up the walls (the command did not run).
pub const HELPER_FAILED: i32 = 125;

/// The walls and limits the helper applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HelperArgs {
    pub data: Option<u64>,
    pub cpu: Option<u64>,
    pub nproc: Option<u64>,
    pub fsize: Option<u64>,
    pub nofile: Option<u64>,
    /// Directories Landlock leaves writable; everything else is read and execute only.
    pub write: Vec<PathBuf>,
    /// Refuse TCP connect and bind (Landlock ABI 4+) as a second wall behind the network
    /// namespace.
    pub no_tcp: bool,
    pub report: bool,
    /// Serve a session's commands instead of running one (the zygote of a [`crate::SessionSandbox`]).
    pub zygote: bool,
    pub command: Vec<OsString>,
}

impl HelperArgs {
    /// The arguments that [`exec_main`] parses back into `self`.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        for (flag, value) in [
            ("--data", self.data),
            ("--cpu", self.cpu),
            ("--nproc", self.nproc),
            ("--fsize", self.fsize),
            ("--nofile", self.nofile),
        ] {
            if let Some(value) = value {
                args.push(flag.into());
                args.push(value.to_string().into());
            }
        }
        for path in &self.write {
            args.push("--write".into());
            args.push(path.into());
        }
        if self.no_tcp {
            args.push("--no-tcp".into());
        }
        if self.report {
            args.push("--report".into());
        }
        if self.zygote {
            args.push("--zygote".into());
            return args;
        }
        args.push("--".into());
        args.extend(self.command.iter().cloned());
        args
    }

    /// Parses the helper's arguments (after the program name).
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Self, String> {
        let mut parsed = Self::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let arg_str = arg.to_str().unwrap_or("");
            let number = |args: &mut dyn Iterator<Item = OsString>| -> Result<u64, String> {
                args.next()
                    .and_then(|v| v.to_str().and_then(|v| v.parse().ok()))
                    .ok_or_else(|| format!("{arg_str} needs a number"))
            };
            match arg_str {
                "--data" => parsed.data = Some(number(&mut args)?),
                "--cpu" => parsed.cpu = Some(number(&mut args)?),
                "--nproc" => parsed.nproc = Some(number(&mut args)?),
                "--fsize" => parsed.fsize = Some(number(&mut args)?),
                "--nofile" => parsed.nofile = Some(number(&mut args)?),
                "--write" => parsed
                    .write
                    .push(args.next().ok_or("--write needs a path")?.into()),
                "--no-tcp" => parsed.no_tcp = true,
                "--report" => parsed.report = true,
                "--zygote" => parsed.zygote = true,
                "--" => {
                    parsed.command = args.collect();
                    break;
                }
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        match (parsed.zygote, parsed.command.is_empty()) {
            (false, true) => return Err("no command after --".into()),
            (true, false) => return Err("--zygote runs no command of its own".into()),
            _ => {}
        }
        Ok(parsed)
    }
}

/// What Landlock enforced in one helper run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandlockReport {
    /// `fully`, `partially` or `not` (enforced).
    pub status: String,
    /// The kernel's Landlock ABI as the crate uses it (0: none).
    pub abi: u32,
}

impl LandlockReport {
    /// Reads the `--report` line.
    pub fn parse(line: &str) -> Option<Self> {
        let line = line.trim();
        let rest = line.strip_prefix("landlock=")?;
        let (status, abi) = rest.split_once(" abi=")?;
        Some(Self {
            status: status.to_owned(),
            abi: abi.trim().parse().ok()?,
        })
    }
}

/// Runs the helper: parses `args` (without the program name), applies the limits and
/// Landlock, and executes the command. Returns only on failure, with the exit code to use.
pub fn exec_main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let args = match HelperArgs::parse(args) {
        Ok(args) => args,
        Err(error) => {
            eprintln!("switchboard-sandbox-exec: {error}");
            return HELPER_FAILED;
        }
    };
    if args.zygote {
        // The zygote stays unlimited (the limits are each command's); Landlock binds it too.
        let applied = landlock_ruleset(&args)
            .map_err(|e| e.to_string())
            .and_then(|ruleset| {
                let copy = ruleset.try_clone().map_err(|e| e.to_string())?;
                let report = restrict(copy).map_err(|e| e.to_string())?;
                Ok((ruleset, report))
            });
        return match applied {
            Ok((ruleset, report)) => crate::supervisor::serve(&args, ruleset, &report),
            Err(error) => {
                eprintln!("switchboard-sandbox-exec: cannot apply Landlock: {error}");
                HELPER_FAILED
            }
        };
    }
    if let Err(error) = apply_limits(&args) {
        eprintln!("switchboard-sandbox-exec: cannot set the limits: {error}");
        return HELPER_FAILED;
    }
    match landlock_ruleset(&args).and_then(restrict) {
        Ok(report) => {
            if args.report {
                eprintln!("landlock={} abi={}", report.status, report.abi);
            }
        }
        Err(error) => {
            eprintln!("switchboard-sandbox-exec: cannot apply Landlock: {error}");
            return HELPER_FAILED;
        }
    }
    let (program, rest) = args.command.split_first().expect("parse checks it");
    let error = std::process::Command::new(program).args(rest).exec();
    eprintln!(
        "switchboard-sandbox-exec: cannot run {}: {error}",
        OsStr::new(program).to_string_lossy()
    );
    127
}

pub(crate) fn apply_limits(args: &HelperArgs) -> std::io::Result<()> {
    for (resource, value) in [
        (libc::RLIMIT_DATA, args.data),
        (libc::RLIMIT_CPU, args.cpu),
        (libc::RLIMIT_NPROC, args.nproc),
        (libc::RLIMIT_FSIZE, args.fsize),
        (libc::RLIMIT_NOFILE, args.nofile),
    ] {
        if let Some(value) = value {
            set_rlimit(resource, value)?;
        }
    }
    Ok(())
}

#[allow(unsafe_code)] // one FFI call, see SAFETY below
fn set_rlimit(resource: libc::__rlimit_resource_t, value: u64) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: setrlimit reads the struct we pass by reference and nothing else.
    let rc = unsafe { libc::setrlimit(resource, &limit) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The Landlock ruleset of the walls, created but not yet applied (the zygote applies a copy
/// to itself and one more to each command).
fn landlock_ruleset(args: &HelperArgs) -> Result<RulesetCreated, landlock::RulesetError> {
    // The newest ABI this crate knows; the best-effort mode drops what the kernel lacks.
    let abi = ABI::V6;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)?;
    if args.no_tcp {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    // The devices a shell writes to. Not /dev/shm: bubblewrap's /dev is an unbounded tmpfs,
    // so Landlock keeps commands from filling memory through it (the size-capped /tmp is the
    // place for scratch files).
    let devices = [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/tty",
        "/dev/pts",
    ];
    let writable: Vec<PathBuf> = args
        .write
        .iter()
        .cloned()
        .chain(devices.map(PathBuf::from))
        .collect();
    ruleset
        .create()?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))?
        .add_rules(path_beneath_rules(&writable, AccessFs::from_all(abi)))
}

fn restrict(ruleset: RulesetCreated) -> Result<LandlockReport, landlock::RulesetError> {
    let status = ruleset.restrict_self()?;
    let status_name = match status.ruleset {
        RulesetStatus::FullyEnforced => "fully",
        RulesetStatus::PartiallyEnforced => "partially",
        RulesetStatus::NotEnforced => "not",
    };
    Ok(LandlockReport {
        status: status_name.to_owned(),
        abi: kernel_abi(),
    })
}

/// The kernel's Landlock ABI version (0 when it has none), straight from the system call.
#[allow(unsafe_code)] // one FFI call, see SAFETY below
pub fn kernel_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the call only returns
    // the ABI version (or an error); it touches no memory.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(version).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_round_trip() {
        let args = HelperArgs {
            data: Some(1),
            cpu: Some(2),
            nproc: None,
            fsize: Some(4),
            nofile: Some(5),
            write: vec!["/w s".into(), "/tmp".into()],
            no_tcp: true,
            report: true,
            zygote: false,
            command: vec!["sh".into(), "-c".into(), "--write".into()],
        };
        assert_eq!(HelperArgs::parse(args.to_args()).unwrap(), args);
        let zygote = HelperArgs {
            zygote: true,
            command: Vec::new(),
            ..args
        };
        assert_eq!(HelperArgs::parse(zygote.to_args()).unwrap(), zygote);
    }

    #[test]
    fn garbage_arguments_are_refused() {
        for bad in [
            vec!["--data"],
            vec!["--data", "x", "--", "a"],
            vec!["--what", "--", "a"],
            vec!["--"],
            vec![],
            vec!["--zygote", "--", "a"],
        ] {
            let bad: Vec<OsString> = bad.into_iter().map(OsString::from).collect();
            assert!(HelperArgs::parse(bad.clone()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn report_lines_parse() {
        assert_eq!(
            LandlockReport::parse("landlock=fully abi=6\n"),
            Some(LandlockReport {
                status: "fully".into(),
                abi: 6
            })
        );
        assert_eq!(LandlockReport::parse("garbage"), None);
    }
}
