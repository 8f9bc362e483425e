//! A throwaway PostgreSQL cluster for tests (feature `testing`): Debian's own binaries, a data
//! directory and a Unix socket in a temp dir, one database per test made from a migrated
//! template so a test starts in about a tenth of a second.
//!
//! - [`PgCluster::start`] runs the server with `fsync=off` and `full_page_writes=off` (a
//!   test's data need not survive a power cut) but `synchronous_commit` on, so a killed server
//!   keeps every acknowledged commit — what the crash tests rely on.
//!   [`PgCluster::start_durable`] syncs as a production server does (for benchmarks).
//! - `listen_addresses=''`: no TCP port at all, so parallel test binaries never race for one.
//! - `initdb` and `pg_ctl` refuse to run as root; as root they run as the `postgres` user (the
//!   Debian package makes it), which owns the temp dir.
//! - A cluster stops when dropped (`pg_ctl stop -m immediate`). A watchdog child also stops it
//!   and removes the dir when this process ends in any way (its stdin is a pipe from here: the
//!   kernel closes it when we die), so a killed test run leaves no server behind.
//! - PostgreSQL missing is an error that says how to install it. The tests that use this fail
//!   on it, with or without `CI` set: they never skip (a skipped database test passes silently
//!   on a machine that cannot run it, which is what `CI` must never see, and a developer
//!   without PostgreSQL is better told at once than given a green run that tested nothing).
//!
//! Every wait is bounded: `pg_ctl -w -t 30`, database creation retried a few times.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::{PgBackend, PgOptions};

/// The database role tests connect as.
pub const USER: &str = "switchboard";

/// How long `pg_ctl` waits for a start, stop or restart.
const PG_CTL_WAIT_S: &str = "30";

/// Why a cluster could not be made.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// No PostgreSQL server binaries were found.
    #[error("PostgreSQL is not installed here (no initdb under /usr/lib/postgresql/*/bin): install Debian's package with `apt-get install postgresql` (.ci/run does), or set SWITCHBOARD_PG_BIN to the directory holding initdb and pg_ctl. The PostgreSQL tests never skip.")]
    NotInstalled,
    /// A command failed.
    #[error("{what} failed: {detail}")]
    Command {
        /// What ran.
        what: String,
        /// Its exit and output.
        detail: String,
    },
    /// The temp dir could not be made or handed to the `postgres` user.
    #[error("cannot prepare {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The directory holding PostgreSQL's server binaries: `SWITCHBOARD_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin` with an `initdb`.
pub fn bin_dir() -> Result<PathBuf, HarnessError> {
    find_bin_dir(
        std::env::var_os("SWITCHBOARD_PG_BIN").map(PathBuf::from),
        Path::new("/usr/lib/postgresql"),
    )
}

/// [`bin_dir`] with its inputs given: an override, and where Debian puts its versions.
fn find_bin_dir(wanted: Option<PathBuf>, versions_root: &Path) -> Result<PathBuf, HarnessError> {
    if let Some(dir) = wanted {
        return if dir.join("initdb").is_file() {
            Ok(dir)
        } else {
            Err(HarnessError::NotInstalled)
        };
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(versions_root)
        .map_err(|_| HarnessError::NotInstalled)?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or(HarnessError::NotInstalled)
}

/// This process's effective user id, from `/proc` (0: root).
fn euid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// The uid and gid of the `postgres` user.
fn postgres_user() -> Result<(u32, u32), HarnessError> {
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|source| HarnessError::Io {
        path: "/etc/passwd".into(),
        source,
    })?;
    passwd
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&"postgres"))
                .then(|| Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?)))
                .flatten()
        })
        .next()
        .ok_or_else(|| HarnessError::Command {
            what: "finding the postgres user".into(),
            detail: "running as root, the server must run as the `postgres` user, and /etc/passwd has none (apt-get install postgresql makes it)".into(),
        })
}

fn run(command: &mut Command, what: &str) -> Result<String, HarnessError> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|err| HarnessError::Command {
            what: what.to_owned(),
            detail: err.to_string(),
        })?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    Err(HarnessError::Command {
        what: what.to_owned(),
        detail: format!(
            "{}: {}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        ),
    })
}

/// A PostgreSQL cluster in a temp dir; see the module doc.
#[derive(Debug)]
pub struct PgCluster {
    dir: PathBuf,
    bin: PathBuf,
    /// Who runs the server binaries (`None`: this process's user).
    owner: Option<(u32, u32)>,
    watchdog: Mutex<Option<Child>>,
    template: OnceLock<Result<(), String>>,
    /// The server's options (`pg_ctl -o`), kept for a start after a stop.
    server_options: String,
    /// Serializes `CREATE DATABASE ... TEMPLATE` (PostgreSQL refuses one while the template is
    /// in use).
    create: Mutex<()>,
    next_db: AtomicU64,
}

impl PgCluster {
    /// Makes and starts a cluster for tests (about a second: `initdb` and a start), with
    /// `fsync=off`.
    pub fn start() -> Result<PgCluster, HarnessError> {
        PgCluster::start_with(false)
    }

    /// Makes and starts a cluster that syncs to disk as a production one does (`fsync` and
    /// `full_page_writes` on): for benchmarks set beside SQLite.
    pub fn start_durable() -> Result<PgCluster, HarnessError> {
        PgCluster::start_with(true)
    }

    fn start_with(durable: bool) -> Result<PgCluster, HarnessError> {
        let bin = bin_dir()?;
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "switchboard-pg-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let io = |source| HarnessError::Io {
            path: dir.clone(),
            source,
        };
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(io)?;
        let owner = if euid() == Some(0) {
            let (uid, gid) = postgres_user()?;
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(io)?;
            Some((uid, gid))
        } else {
            None
        };
        let sync = if durable { "on" } else { "off" };
        let server_options = format!(
            "-k {} -c listen_addresses='' -c fsync={sync} -c full_page_writes={sync} \
             -c synchronous_commit=on -c max_connections=200",
            dir.display()
        );
        let cluster = PgCluster {
            dir,
            bin,
            owner,
            watchdog: Mutex::new(None),
            template: OnceLock::new(),
            server_options,
            create: Mutex::new(()),
            next_db: AtomicU64::new(0),
        };
        let data = cluster.data();
        run(
            cluster
                .server_tool("initdb")
                .arg("-D")
                .arg(&data)
                .args(["-A", "trust", "-U", USER, "-E", "UTF8", "--locale=C.UTF-8"])
                .arg("--no-sync"),
            "initdb",
        )?;
        cluster.arm_watchdog()?;
        cluster.start_again()?;
        Ok(cluster)
    }

    /// One cluster for this whole test process, started on first use, stopped by the watchdog
    /// when the process ends. Panics (the test fails) when PostgreSQL cannot run here.
    pub fn shared() -> &'static PgCluster {
        static SHARED: OnceLock<PgCluster> = OnceLock::new();
        SHARED.get_or_init(|| match PgCluster::start() {
            Ok(cluster) => cluster,
            Err(err) => panic!("cannot start a PostgreSQL for the tests: {err}"),
        })
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The directory holding the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// The server's log, for a failing test to show.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pg.log")).unwrap_or_default()
    }

    fn server_tool(&self, name: &str) -> Command {
        let mut command = Command::new(self.bin.join(name));
        command.current_dir(&self.dir);
        if let Some((uid, gid)) = self.owner {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(gid);
        }
        command
    }

    fn client_tool(&self, name: &str) -> Command {
        let mut command = Command::new(self.bin.join(name));
        command
            .current_dir(&self.dir)
            .arg("-h")
            .arg(&self.dir)
            .args(["-U", USER]);
        command
    }

    /// Starts the child that stops the server and removes the dir once this process is gone.
    fn arm_watchdog(&self) -> Result<(), HarnessError> {
        let script = r#"cat >/dev/null; pid=$(head -n 1 "$1/data/postmaster.pid" 2>/dev/null); [ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null; i=0; while [ $i -lt 50 ] && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.1; i=$((i+1)); done; rm -rf "$1""#;
        let child = Command::new("sh")
            .args(["-c", script, "pg-watchdog"])
            .arg(&self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|err| HarnessError::Command {
                what: "starting the watchdog".into(),
                detail: err.to_string(),
            })?;
        *self
            .watchdog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(child);
        Ok(())
    }

    /// A libpq-style connection string for `database`, over the Unix socket.
    pub fn conninfo(&self, database: &str) -> String {
        format!("host={} user={USER} dbname={database}", self.dir.display())
    }

    /// The same as a `postgres://` URL (what `store.url` takes).
    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://{USER}@localhost/{database}?host={}",
            self.dir.display()
        )
    }

    /// Runs SQL on `database` with psql; its unaligned output.
    pub fn psql(&self, database: &str, sql: &str) -> Result<String, HarnessError> {
        run(
            self.client_tool("psql").args([
                "-d",
                database,
                "-X",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ]),
            "psql",
        )
        .map(|out| out.trim().to_owned())
    }

    /// A new empty database (no schema); its name.
    pub fn empty_database(&self) -> Result<String, HarnessError> {
        let name = format!("e{}", self.next_db.fetch_add(1, Ordering::Relaxed));
        run(self.client_tool("createdb").arg(&name), "createdb")?;
        Ok(name)
    }

    /// A new database with switchboard's schema, copied from a migrated template; its name.
    pub fn database(&self) -> Result<String, HarnessError> {
        let template = self.template.get_or_init(|| {
            let make = || -> Result<(), String> {
                run(self.client_tool("createdb").arg("tpl"), "createdb tpl")
                    .map_err(|e| e.to_string())?;
                let backend = PgBackend::open(&self.conninfo("tpl"), PgOptions::default())
                    .map_err(|e| e.to_string())?;
                futures_executor::block_on(switchboard_store::Backend::close(&backend))
                    .map_err(|e| e.to_string())?;
                drop(backend);
                Ok(())
            };
            make()
        });
        if let Err(err) = template {
            return Err(HarnessError::Command {
                what: "migrating the template database".into(),
                detail: err.clone(),
            });
        }
        let name = format!("t{}", self.next_db.fetch_add(1, Ordering::Relaxed));
        let _one_at_a_time = self
            .create
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut last = None;
        for _ in 0..20 {
            match run(
                self.client_tool("createdb").args(["-T", "tpl"]).arg(&name),
                "createdb from the template",
            ) {
                Ok(_) => return Ok(name),
                // The template is briefly in use (a backend of it still closing).
                Err(err) => {
                    last = Some(err);
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        Err(last.unwrap_or(HarnessError::NotInstalled))
    }

    /// Runs `pg_ctl` on this cluster's data dir (waiting at most [`PG_CTL_WAIT_S`]) with
    /// `args`, logging to `pg.log`.
    fn pg_ctl(&self, args: &[&str]) -> Result<(), HarnessError> {
        let what = format!("pg_ctl {}", args.last().unwrap_or(&""));
        run(
            self.server_tool("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(self.dir.join("pg.log"))
                .args(["-w", "-t", PG_CTL_WAIT_S])
                .args(args),
            &what,
        )
        .map(drop)
    }

    /// Crashes and restarts the server (`pg_ctl restart -m immediate`): clients lose their
    /// connections; every acknowledged commit survives.
    pub fn restart_immediate(&self) -> Result<(), HarnessError> {
        self.pg_ctl(&["-m", "immediate", "restart"])
    }

    /// Stops the server at once (`-m immediate`), leaving the dir; [`PgCluster::start_again`]
    /// brings it back.
    pub fn stop_immediate(&self) -> Result<(), HarnessError> {
        self.pg_ctl(&["-m", "immediate", "stop"])
    }

    /// Starts a stopped server again with the options it had.
    pub fn start_again(&self) -> Result<(), HarnessError> {
        self.pg_ctl(&["-o", &self.server_options, "start"])
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // The watchdog does the work: closing its stdin stops the server and removes the dir.
        let child = self
            .watchdog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(mut child) = child {
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.flush();
            }
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_installed_version_is_found_and_a_missing_one_says_how_to_install() {
        let root = std::env::temp_dir().join(format!("switchboard-pg-bin-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for version in ["13", "15", "9x"] {
            std::fs::create_dir_all(root.join(version).join("bin")).unwrap();
        }
        std::fs::write(root.join("13/bin/initdb"), "").unwrap();
        std::fs::write(root.join("15/bin/initdb"), "").unwrap();
        assert_eq!(find_bin_dir(None, &root).unwrap(), root.join("15/bin"));
        assert_eq!(
            find_bin_dir(Some(root.join("13/bin")), &root).unwrap(),
            root.join("13/bin")
        );
        let missing = find_bin_dir(None, &root.join("nothing")).unwrap_err();
        assert!(
            missing.to_string().contains("apt-get install postgresql"),
            "{missing}"
        );
        assert!(find_bin_dir(Some(root.join("9x/bin")), &root).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
