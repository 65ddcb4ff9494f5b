//! Test support: provides the integration tests with a PostgreSQL server.
//!
//! It owns the decision of *which* server the tests talk to, in this order:
//! `DATABASE_URL`, then a server already listening on 127.0.0.1:5432, then a
//! throwaway cluster started once per test process (via `initdb`/`pg_ctl`) and
//! torn down by a watchdog once the process exits. Tests that need PostgreSQL
//! must fail, not skip, so when nothing works this panics with what was tried.
//! Only `std` is used, so the tests take no extra dependencies.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::watchdog;

/// Returns the base connection URL of a PostgreSQL server the tests may create
/// databases on, e.g. `"postgres://postgres@127.0.0.1:5432"`, with no path, so
/// callers append `/<dbname>`. If `DATABASE_URL` is set, its path and query
/// string (e.g. `/mydb?sslmode=disable`) are dropped. Called from many test
/// threads; the work is done once per process.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn server_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Some(url) = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()) {
            return strip_path(&url);
        }
        let default: SocketAddr = ([127, 0, 0, 1], 5432).into();
        if TcpStream::connect_timeout(&default, Duration::from_secs(1)).is_ok() {
            return "postgres://postgres@127.0.0.1:5432".to_string();
        }
        throwaway_cluster().url
    })
    .clone()
}

/// A private PostgreSQL cluster of this test process.
#[allow(dead_code)]
pub struct Cluster {
    /// Base URL, without a database name.
    pub url: String,
    data: PathBuf,
    pg_ctl: PathBuf,
    as_root: bool,
}

#[allow(dead_code)]
impl Cluster {
    /// Restarts the server (`pg_ctl restart -m fast`): every connection is cut, as when a
    /// production database restarts under the gateway.
    pub fn restart(&self) {
        let argv = pg_user_argv(
            self.as_root,
            vec![
                self.pg_ctl.display().to_string(),
                "-D".into(),
                self.data.display().to_string(),
                "-m".into(),
                "fast".into(),
                "-w".into(),
                "restart".into(),
            ],
        );
        let status = command(&argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("cannot run pg_ctl restart: {e}"));
        assert!(status.success(), "pg_ctl restart failed ({status})");
    }
}

/// `scheme://authority/path?query` -> `scheme://authority`.
fn strip_path(url: &str) -> String {
    let authority_start = url.find("://").map_or(0, |i| i + 3);
    match url[authority_start..].find(['/', '?']) {
        Some(end) => url[..authority_start + end].to_string(),
        None => url.to_string(),
    }
}

/// Starts a private cluster in a temp dir, plus a watchdog that stops it and
/// deletes the dir once this process has exited.
pub fn throwaway_cluster() -> Cluster {
    start_cluster(None)
}

/// A server certificate and its key (PEM files) for a cluster that serves TLS.
#[allow(dead_code)]
pub struct ServerTls<'a> {
    pub cert_file: &'a Path,
    pub key_file: &'a Path,
}

/// As [`throwaway_cluster`], with `ssl=on` and the given certificate: clients may connect with
/// `sslmode=require|verify-ca|verify-full`. The files are copied into the cluster's directory
/// (the server's user must own its key, readable by it alone).
#[allow(dead_code)]
pub fn throwaway_tls_cluster(tls: ServerTls<'_>) -> Cluster {
    start_cluster(Some(tls))
}

fn start_cluster(tls: Option<ServerTls<'_>>) -> Cluster {
    let bin = find_pg_bin_dir().unwrap_or_else(|| {
        panic!(
            "no PostgreSQL server for the tests: DATABASE_URL is unset, nothing accepts \
             connections on 127.0.0.1:5432, and no directory with both `initdb` and `pg_ctl` \
             was found on PATH, under /usr/lib/postgresql/*/bin or in /usr/local/pgsql/bin"
        )
    });
    let (initdb, pg_ctl) = (bin.join("initdb"), bin.join("pg_ctl"));
    let as_root = is_root();

    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("pgtest-{}-{nanos}", std::process::id()));
    let data = dir.join("data");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create temp dir {}: {e}", dir.display()));
    let mut ssl_options = String::new();
    if let Some(tls) = &tls {
        let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
        std::fs::copy(tls.cert_file, &cert).unwrap_or_else(|e| panic!("cannot copy the server certificate: {e}"));
        std::fs::copy(tls.key_file, &key).unwrap_or_else(|e| panic!("cannot copy the server key: {e}"));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| panic!("cannot restrict the server key: {e}"));
        ssl_options = format!(" -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}", cert.display(), key.display());
    }
    if as_root {
        // PostgreSQL refuses to run as root, so the `postgres` OS user owns the cluster.
        run_checked(Command::new("chown").arg("-R").arg("postgres").arg(&dir), "chown");
    }

    let init = pg_user_argv(
        as_root,
        vec![initdb.display().to_string(), "-D".into(), data.display().to_string()]
            .into_iter()
            .chain(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"].map(String::from))
            .collect(),
    );
    run_checked(&mut command(&init), "initdb");

    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("cannot bind 127.0.0.1:0 to pick a free port")
        .port();
    let log = dir.join("log");
    let options = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300{ssl_options}",
        dir.display()
    );
    let start = pg_user_argv(
        as_root,
        vec![
            pg_ctl.display().to_string(),
            "-D".into(),
            data.display().to_string(),
            "-l".into(),
            log.display().to_string(),
            "-w".into(),
            "-o".into(),
            options,
            "start".into(),
        ],
    );
    let status = command(&start)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", pg_ctl.display()));
    if !status.success() {
        let log_text = std::fs::read_to_string(&log).unwrap_or_default();
        panic!("`pg_ctl start` failed ({status}); server log {}:\n{log_text}", log.display());
    }

    // Watchdog: runs as the current user (so `kill -0` may probe this process), in
    // its own process group so a Ctrl-C aimed at the tests does not kill it.
    let stop = pg_user_argv(
        as_root,
        vec![
            pg_ctl.display().to_string(),
            "-D".into(),
            data.display().to_string(),
            "-m".into(),
            "immediate".into(),
            "stop".into(),
        ],
    );
    let cleanup = format!("{} >/dev/null 2>&1; rm -rf {}", shell_join(&stop), shell_quote(&dir.display().to_string()));
    watchdog::after_this_process(&cleanup, "the throwaway PostgreSQL cluster");

    Cluster { url: format!("postgres://postgres@127.0.0.1:{port}"), data, pg_ctl, as_root }
}

/// First directory holding both `initdb` and `pg_ctl`: PATH, then
/// /usr/lib/postgresql/<version>/bin (highest version first), then /usr/local/pgsql/bin.
fn find_pg_bin_dir() -> Option<PathBuf> {
    let mut candidates = path_dirs();
    let mut versioned: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name.split('.').map(|p| p.parse().unwrap_or(0)).collect(), e.path().join("bin"))
        })
        .collect();
    versioned.sort_by(|a, b| b.0.cmp(&a.0));
    candidates.extend(versioned.into_iter().map(|(_, dir)| dir));
    candidates.push(PathBuf::from("/usr/local/pgsql/bin"));
    candidates.into_iter().find(|d| d.join("initdb").is_file() && d.join("pg_ctl").is_file())
}

fn path_dirs() -> Vec<PathBuf> {
    std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default()
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Wraps `argv` so it runs as the `postgres` OS user when we are root.
fn pg_user_argv(as_root: bool, argv: Vec<String>) -> Vec<String> {
    if !as_root {
        return argv;
    }
    let sbin = [PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")];
    if path_dirs().iter().chain(&sbin).any(|d| d.join("runuser").is_file()) {
        ["runuser", "-u", "postgres", "--"].map(String::from).into_iter().chain(argv).collect()
    } else {
        vec!["su".into(), "postgres".into(), "-c".into(), shell_join(&argv)]
    }
}

fn command(argv: &[String]) -> Command {
    let mut cmd = Command::new(Path::new(&argv[0]));
    cmd.args(&argv[1..]);
    cmd
}

fn run_checked(cmd: &mut Command, what: &str) {
    let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("cannot run {what} ({cmd:?}): {e}"));
    if !out.status.success() {
        panic!(
            "{what} failed ({}): {cmd:?}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn shell_join(argv: &[String]) -> String {
    argv.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ")
}
