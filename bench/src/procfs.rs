//! What the processes under test cost, read from `/proc`: CPU time (`/proc/<pid>/stat`,
//! utime + stime), resident memory (`/proc/<pid>/status`, VmRSS), the machine's busy time
//! (`/proc/stat`), and the open-file limit the tool raises for itself.

use std::time::Instant;

use crate::error::{Context, Result};

fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf only reads a constant of the running system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// CPU time (user + system) a process has used, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces; fields are counted after its ')'.
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).context("malformed /proc/<pid>/stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After ')': state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let utime: u64 = fields.get(11).and_then(|v| v.parse().ok()).context("no utime in /proc/<pid>/stat")?;
    let stime: u64 = fields.get(12).and_then(|v| v.parse().ok()).context("no stime in /proc/<pid>/stat")?;
    Ok(utime + stime)
}

/// Resident memory of a process, in KiB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/<pid>/status")
}

/// Every PostgreSQL server process (the postmaster, its backends and helpers).
fn postgres_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "postgres"))
        .collect()
}

/// (busy, total) jiffies of the whole machine, all cores.
fn machine_ticks() -> Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = stat.lines().next().context("empty /proc/stat")?;
    let values: Vec<u64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let total: u64 = values.iter().take(8).sum();
    // idle and iowait are fields 4 and 5.
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    Ok((total.saturating_sub(idle), total))
}

/// A snapshot of CPU time used so far by the server under test, PostgreSQL, this tool and the
/// whole machine.
#[derive(Debug, Clone)]
pub struct CpuSnapshot {
    at: Instant,
    server: u64,
    /// Each server's own ticks when several were given ([`CpuSnapshot::take_all`]).
    servers: Vec<u64>,
    /// Each PostgreSQL process's ticks: a window's figure is the sum of each process's own
    /// growth, so a backend that exits meanwhile (its ticks gone from the later sum) does not
    /// hide the others' work.
    postgres: std::collections::HashMap<u32, u64>,
    tool: u64,
    machine_busy: u64,
    machine_total: u64,
}

/// CPU used between two snapshots, each in % of one core (the machine figure is of all cores
/// together, so 200 % on two cores is everything).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct CpuUse {
    pub server: f64,
    pub postgres: f64,
    pub tool: f64,
    pub machine: f64,
    /// The machine's busy time not explained by the three above (other work on the machine).
    pub other: f64,
}

impl CpuSnapshot {
    /// A snapshot with no server process (the raw scenario: PostgreSQL and this tool only).
    pub fn without_server() -> Result<CpuSnapshot> {
        CpuSnapshot::take(0)
    }

    /// A snapshot with `server_pid` as the server under test (0: none).
    pub fn take(server_pid: u32) -> Result<CpuSnapshot> {
        if server_pid == 0 {
            return CpuSnapshot::take_all(&[]);
        }
        CpuSnapshot::take_all(&[server_pid])
    }

    /// A snapshot with several servers under test (instances of one database): `server` is
    /// their sum, and each is kept for [`CpuSnapshot::each_until`].
    pub fn take_all(server_pids: &[u32]) -> Result<CpuSnapshot> {
        let servers = server_pids.iter().map(|&pid| cpu_ticks(pid)).collect::<Result<Vec<u64>>>()?;
        let postgres = postgres_pids().into_iter().filter_map(|pid| Some((pid, cpu_ticks(pid).ok()?))).collect();
        let (machine_busy, machine_total) = machine_ticks()?;
        Ok(CpuSnapshot {
            at: Instant::now(),
            server: servers.iter().sum(),
            servers,
            postgres,
            tool: cpu_ticks(std::process::id())?,
            machine_busy,
            machine_total,
        })
    }

    /// Each server's CPU from `self` to `later` (% of one core), in the order given.
    pub fn each_until(&self, later: &CpuSnapshot) -> Vec<f64> {
        let seconds = later.at.duration_since(self.at).as_secs_f64().max(1e-6);
        self.servers
            .iter()
            .zip(&later.servers)
            .map(|(a, b)| b.saturating_sub(*a) as f64 / clock_ticks_per_sec() / seconds * 100.0)
            .collect()
    }

    /// CPU used from `self` to `later`.
    pub fn until(&self, later: &CpuSnapshot) -> CpuUse {
        let seconds = later.at.duration_since(self.at).as_secs_f64().max(1e-6);
        let per_core = |ticks: u64| ticks as f64 / clock_ticks_per_sec() / seconds * 100.0;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let machine_total = later.machine_total.saturating_sub(self.machine_total).max(1);
        let machine_busy = later.machine_busy.saturating_sub(self.machine_busy);
        let machine = machine_busy as f64 / machine_total as f64 * cores * 100.0;
        let server = per_core(later.server.saturating_sub(self.server));
        // A backend started meanwhile counts from zero; one that exited meanwhile loses only its
        // own share of the window.
        let postgres_ticks: u64 = later
            .postgres
            .iter()
            .map(|(pid, ticks)| ticks.saturating_sub(self.postgres.get(pid).copied().unwrap_or(0)))
            .sum();
        let postgres = per_core(postgres_ticks);
        let tool = per_core(later.tool.saturating_sub(self.tool));
        CpuUse { server, postgres, tool, machine, other: (machine - server - postgres - tool).max(0.0) }
    }
}

/// Raises this process's open-file limit to its hard limit (the idle scenario holds thousands
/// of connections). Returns the limit now in force.
pub fn raise_open_files_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
    }
    limit.rlim_cur
}

/// Waits (up to `max_wait`) until the machine's busy time over one second is at most
/// `max_busy` % of one core, so other work on a shared machine does not skew a measurement.
/// Returns the last busy figure seen.
pub async fn wait_until_quiet(max_busy: f64, max_wait: std::time::Duration) -> Result<f64> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let started = Instant::now();
    let mut told = false;
    loop {
        let (busy_a, total_a) = machine_ticks()?;
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let (busy_b, total_b) = machine_ticks()?;
        let busy = (busy_b - busy_a) as f64 / (total_b - total_a).max(1) as f64 * cores * 100.0;
        if busy <= max_busy || started.elapsed() >= max_wait {
            if told {
                eprintln!(
                    "  (machine busy {busy:.0} % of a core after waiting {:.0} s)",
                    started.elapsed().as_secs_f64()
                );
            }
            return Ok(busy);
        }
        if !told {
            eprintln!("  waiting for other work on the machine to stop (busy {busy:.0} % of a core)…");
            told = true;
        }
    }
}
