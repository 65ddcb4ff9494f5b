//! PostgreSQL over TLS (docs/tls.md): a throwaway cluster started with `ssl=on` and a
//! certificate for `localhost` from a CA made in the test. `sslmode=verify-full` with that CA
//! connects (over TLS, as the server itself reports); a wrong host name or a wrong CA stops
//! the start with an error naming the certificate problem. `verify-ca` and `require` encrypt
//! too. The whole PostgreSQL half of this suite also runs over `verify-full`
//! under `AGUI_TEST_POSTGRES_TLS=1` (`scripts/test`).

use crate::helpers::*;
use crate::tls_support::TestCa;

/// A fresh database on the TLS cluster, reached with the admin connection over verify-full.
async fn tls_database(cluster: &TlsCluster) -> String {
    let name = format!("agui_tls_{}", uuid::Uuid::new_v4().simple());
    let admin = format!("{}/postgres{}", cluster.base, cluster.verify_full_query());
    execute_sql(&admin, &format!("CREATE DATABASE {name}")).await;
    name
}

/// Whether the session on `url` is encrypted, by the server's own account (`pg_stat_ssl`).
async fn session_is_encrypted(url: &str) -> bool {
    let mut connection =
        <sqlx::PgConnection as sqlx::Connection>::connect(url).await.unwrap_or_else(|e| panic!("connect {url}: {e}"));
    let (ssl,): (bool,) = sqlx::query_as("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut connection)
        .await
        .expect("pg_stat_ssl");
    ssl
}

async fn start_error(url: &str) -> String {
    match agui_gateway::server::Server::start(test_config(url)).await {
        Ok(_) => panic!("the gateway started on {url}"),
        Err(error) => error.to_string(),
    }
}

#[tokio::test]
async fn verify_full_with_the_right_ca_serves_runs_over_an_encrypted_session() {
    let cluster = tls_cluster();
    let name = tls_database(cluster).await;
    let url = format!("{}/{name}{}", cluster.base, cluster.verify_full_query());
    assert!(session_is_encrypted(&url).await, "verify-full gives an encrypted session");
    let app = TestApp::start(&url).await;
    let events = app.run_to_end("demo", &first_run("th-pg-tls", "run-1", "hello")).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    assert!(app.counts().await.events > 0, "the run's events are in the database reached over TLS");
}

#[tokio::test]
async fn a_wrong_host_name_or_ca_stops_the_start_with_a_clear_error() {
    let cluster = tls_cluster();
    let name = tls_database(cluster).await;
    let ca = cluster.ca.ca_file().display().to_string();
    let stranger = TestCa::new("stranger");
    let by_address = format!("postgres://postgres@127.0.0.1:{}/{name}", cluster.port);
    let by_name = format!("{}/{name}", cluster.base);

    let error = start_error(&format!("{by_address}?sslmode=verify-full&sslrootcert={ca}")).await;
    assert!(
        error.starts_with(
            "database: TLS: certificate not valid for host 127.0.0.1 (NotValidForName; it names localhost)"
        ),
        "{error}"
    );
    let error =
        start_error(&format!("{by_name}?sslmode=verify-full&sslrootcert={}", stranger.ca_file().display())).await;
    assert!(error.starts_with("database: TLS: certificate not trusted (UnknownIssuer) for host localhost"), "{error}");
    assert!(error.contains("sslrootcert"), "the setting that decides trust is named: {error}");
    let error = start_error(&format!("{by_name}?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")).await;
    assert!(error.contains("/nonexistent/ca.pem"), "a missing root file is named: {error}");

    // verify-ca checks the chain; require encrypts without checking (libpq's meanings of the
    // modes). Unlike libpq, verify-ca checks the host name too with this driver (docs/tls.md),
    // so it is tried on the certificate's own name.
    assert!(session_is_encrypted(&format!("{by_name}?sslmode=verify-ca&sslrootcert={ca}")).await);
    let error =
        start_error(&format!("{by_address}?sslmode=verify-ca&sslrootcert={}", stranger.ca_file().display())).await;
    assert!(error.starts_with("database: TLS: certificate not trusted (UnknownIssuer)"), "{error}");
    assert!(session_is_encrypted(&format!("{by_address}?sslmode=require")).await);
}
