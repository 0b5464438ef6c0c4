//! The PostgreSQL guard against a live server (guard/pg-server.sh starts one per test, in a
//! directory of its own): the exclusive and shared rules, a stale writer refused with both
//! tokens named and none of its statements applied, a stale writer that arrives while a newer
//! one holds the row, co-holders beside each other and an exclusive writer waiting for them,
//! writers in several processes at once, and the `tenure-guard` command. Without PostgreSQL
//! installed each test says so and returns, unless `TENURE_REQUIRE_POSTGRES` is set.

use std::process::Command;
use std::time::{Duration, Instant};

use tenure_guard::postgres::{create_table, guard, highest, Error, Mode};
use tenure_guard::test_server::TestServer;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

/// One PostgreSQL server (stopped, and its directory removed, when dropped), and the
/// connections the tests make to it.
struct Server {
    _server: TestServer,
    conn: String,
}

impl Server {
    /// A server, or `None` (with a note) where no PostgreSQL is installed and
    /// `TENURE_REQUIRE_POSTGRES` is not set (`.ci/run` sets it).
    fn start() -> Option<Self> {
        let server = TestServer::for_test("the guard's PostgreSQL tests")?;
        let conn = server.conn().to_owned();
        Some(Self {
            _server: server,
            conn,
        })
    }

    /// A connection, with the table made and `register` for the tests' writes, and its
    /// server process's pid.
    async fn client(&self) -> (Client, i32) {
        let (client, connection) = tokio_postgres::connect(&self.conn, tokio_postgres::NoTls)
            .await
            .expect("connects");
        tokio::spawn(connection);
        create_table(&client).await.expect("the fence table");
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS register (id bigserial PRIMARY KEY, token bigint NOT NULL)",
            )
            .await
            .expect("the register table");
        let pid = client.query_one("SELECT pg_backend_pid()", &[]).await;
        (client, pid.expect("its pid").get(0))
    }
}

/// Waits until PostgreSQL reports the session `waiter` blocked by the session `holder`,
/// failing if `task` (the waiter's work) ends first or it takes 10 s.
async fn blocked<T>(observer: &Client, waiter: i32, holder: i32, task: &JoinHandle<T>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let query = "SELECT $2 = ANY(pg_blocking_pids($1))";
    while !observer
        .query_one(query, &[&waiter, &holder])
        .await
        .expect("reads the locks")
        .get::<_, bool>(0)
    {
        assert!(!task.is_finished(), "the writer did not wait for the row");
        assert!(Instant::now() < deadline, "the writer is not waiting");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One guarded write of `token` into `register`: `Ok` if it committed.
async fn write(client: &mut Client, token: u64, mode: Mode) -> Result<(), Error> {
    let txn = client.transaction().await?;
    guard(&txn, "r", token, mode).await?;
    let token = i64::try_from(token).expect("a small token");
    txn.execute("INSERT INTO register (token) VALUES ($1)", &[&token])
        .await?;
    Ok(txn.commit().await?)
}

/// The tokens in `register`, in the order they were written.
async fn register(client: &Client) -> Vec<i64> {
    let rows = client
        .query("SELECT token FROM register ORDER BY id", &[])
        .await
        .expect("reads the register");
    rows.iter().map(|r| r.get(0)).collect()
}

fn stale(result: Result<(), Error>) -> (u64, u64) {
    match result {
        Err(Error::Stale {
            resource,
            highest,
            got,
        }) => {
            assert_eq!(resource, "r");
            (highest, got)
        }
        other => panic!("expected a stale token, got {other:?}"),
    }
}

#[tokio::test]
async fn exclusive_writers_advance_the_fence_and_a_stale_one_is_refused_and_rolled_back() {
    let Some(server) = Server::start() else {
        return;
    };
    let (mut client, _) = server.client().await;
    write(&mut client, 5, Mode::Exclusive).await.expect("first");
    write(&mut client, 5, Mode::Exclusive)
        .await
        .expect("the same tenure again");
    write(&mut client, 9, Mode::Exclusive)
        .await
        .expect("a later tenure");
    let refused = write(&mut client, 7, Mode::Exclusive).await;
    let message = refused.as_ref().expect_err("7 after 9").to_string();
    assert!(
        message.contains("seen 9, this write carries 7"),
        "{message}"
    );
    assert_eq!(stale(refused), (9, 7));
    // The refused writer's insert is not there, and the fence is where the later tenure left it.
    assert_eq!(register(&client).await, [5, 5, 9]);
    assert_eq!(highest(&client, "r").await.expect("reads"), 9);
    write(&mut client, 9, Mode::Exclusive)
        .await
        .expect("9 still writes");
}

#[tokio::test]
async fn shared_writers_are_checked_against_the_exclusive_fence_and_fence_out_older_ones() {
    let Some(server) = Server::start() else {
        return;
    };
    let (mut client, _) = server.client().await;
    // Shared writers on a resource no exclusive writer has written: all pass.
    write(&mut client, 4, Mode::Shared).await.expect("shared 4");
    write(&mut client, 10, Mode::Exclusive)
        .await
        .expect("exclusive 10");
    assert_eq!(stale(write(&mut client, 8, Mode::Shared).await), (10, 8));
    // Co-holders after the exclusive tenure: unordered among themselves.
    write(&mut client, 12, Mode::Shared)
        .await
        .expect("shared 12");
    write(&mut client, 11, Mode::Shared)
        .await
        .expect("shared 11 after 12");
    // The exclusive holder of 10, back after its tenure ended and theirs began: refused.
    assert_eq!(
        stale(write(&mut client, 10, Mode::Exclusive).await),
        (12, 10)
    );
    assert_eq!(highest(&client, "r").await.expect("reads"), 12);
    // An exclusive tenure after them fences them out.
    write(&mut client, 13, Mode::Exclusive)
        .await
        .expect("exclusive 13");
    assert_eq!(stale(write(&mut client, 12, Mode::Shared).await), (13, 12));
    assert_eq!(register(&client).await, [4, 10, 12, 11, 13]);
}

#[tokio::test]
async fn tokens_tenure_never_grants_are_refused() {
    let Some(server) = Server::start() else {
        return;
    };
    let (mut client, _) = server.client().await;
    for token in [0, u64::MAX, 1 << 63] {
        for mode in [Mode::Exclusive, Mode::Shared] {
            match write(&mut client, token, mode).await {
                Err(Error::Token(t)) => assert_eq!(t, token),
                other => panic!("token {token}: {other:?}"),
            }
        }
    }
    assert!(register(&client).await.is_empty());
}

#[tokio::test]
async fn a_stale_writer_waits_while_a_newer_one_holds_the_row_then_is_refused() {
    let Some(server) = Server::start() else {
        return;
    };
    let (mut newer, newer_pid) = server.client().await;
    let (mut older, older_pid) = server.client().await;
    let (observer, _) = server.client().await;
    write(&mut older, 3, Mode::Exclusive)
        .await
        .expect("an earlier tenure");
    let txn = newer.transaction().await.expect("begins");
    guard(&txn, "r", 7, Mode::Exclusive)
        .await
        .expect("7 passes");
    let late = tokio::spawn(async move { write(&mut older, 5, Mode::Exclusive).await });
    blocked(&observer, older_pid, newer_pid, &late).await;
    txn.execute("INSERT INTO register (token) VALUES (7)", &[])
        .await
        .expect("writes");
    txn.commit().await.expect("commits");
    assert_eq!(stale(late.await.expect("joins")), (7, 5));
    assert_eq!(register(&observer).await, [3, 7]);
}

#[tokio::test]
async fn co_holders_write_side_by_side_and_an_exclusive_writer_waits_for_them() {
    let Some(server) = Server::start() else {
        return;
    };
    let (mut a, a_pid) = server.client().await;
    let (mut b, _) = server.client().await;
    let (mut exclusive, exclusive_pid) = server.client().await;
    let (observer, _) = server.client().await;
    write(&mut a, 12, Mode::Shared).await.expect("12 recorded");
    // A co-holder holds the row FOR SHARE; another of the same grant is not held up by it.
    let a_txn = a.transaction().await.expect("begins");
    guard(&a_txn, "r", 12, Mode::Shared)
        .await
        .expect("a passes");
    let b_write = write(&mut b, 12, Mode::Shared);
    tokio::time::timeout(Duration::from_secs(10), b_write)
        .await
        .expect("a co-holder does not wait for another")
        .expect("b passes");
    // An exclusive writer of a later tenure waits for the co-holder still writing.
    let later = tokio::spawn(async move { write(&mut exclusive, 20, Mode::Exclusive).await });
    blocked(&observer, exclusive_pid, a_pid, &later).await;
    a_txn
        .execute("INSERT INTO register (token) VALUES (12)", &[])
        .await
        .expect("writes");
    a_txn.commit().await.expect("commits");
    later
        .await
        .expect("joins")
        .expect("20 passes once a is done");
    assert_eq!(register(&observer).await, [12, 12, 12, 20]);
}

#[tokio::test]
async fn writers_in_several_processes_commit_in_token_order() {
    let Some(server) = Server::start() else {
        return;
    };
    let (client, _) = server.client().await;
    // Twenty-four processes at once, tokens 1 to 8 three times each: whatever order they reach
    // the database in, what commits is in token order, the rest is refused (exit status 3,
    // its own token named), and the highest token's writes all commit.
    let bin = env!("CARGO_BIN_EXE_tenure-guard");
    let mut children = Vec::new();
    for round in 0..3 {
        for token in (1..=8u64).rev() {
            let sql = format!("INSERT INTO register (token) VALUES ({token})");
            let child = tokio::process::Command::new(bin)
                .args(["pg-write", "--url", &server.conn, "--resource", "r"])
                .args(["--token", &token.to_string(), &sql])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawns tenure-guard");
            children.push((round, token, child));
        }
    }
    let mut refused = 0;
    for (round, token, child) in children {
        let out = child.wait_with_output().await.expect("waits");
        let stderr = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) => {}
            Some(3) => {
                refused += 1;
                assert!(stderr.contains(&format!("carries {token}")), "{stderr}");
            }
            other => panic!("round {round} token {token}: {other:?} {stderr}"),
        }
    }
    let written = register(&client).await;
    assert!(
        written.windows(2).all(|w| w[0] <= w[1]),
        "out of token order: {written:?}"
    );
    assert_eq!(written.len() + refused, 24);
    assert_eq!(written.iter().filter(|t| **t == 8).count(), 3);
    assert_eq!(highest(&client, "r").await.expect("reads"), 8);
}

#[tokio::test]
async fn the_command_reports_sql_that_ends_the_guarded_transaction() {
    let Some(server) = Server::start() else {
        return;
    };
    let (client, _) = server.client().await;
    let run = |token: &str, shared: bool, sql: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tenure-guard"));
        command.args(["pg-write", "--url", &server.conn, "--resource", "r"]);
        command.args(["--token", token, sql]);
        if shared {
            command.arg("--shared");
        }
        command.output().expect("runs tenure-guard")
    };
    let out = run(
        "4",
        false,
        "INSERT INTO register (token) VALUES (4); COMMIT",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("ended the guarded transaction"), "{stderr}");
    // A shared writer below the exclusive token the COMMIT let through: refused, exit 3.
    let out = run("2", true, "INSERT INTO register (token) VALUES (2)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("seen 4, this write carries 2"), "{stderr}");
    let out = run("0", false, "SELECT 1");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(register(&client).await, [4]);
}
