//! A tenant's share of the claims within a class (`payonce tenant set-share`, `payonce tenant
//! shares`, issue 51): set, listed, cleared back to the default; a share out of range refused as a
//! usage error, as `set-processor` refuses a processor it does not know, with nothing written. And a
//! tenant's own cap (`payonce tenant set-cap`), the same way.

use crate::serve::{migrate, payonce, scratch};
use payonce_core::id::TenantId;
use payonce_core::priority::{CAP_PER_SECOND_MAX, SHARE_DEFAULT, SHARE_MAX};
use std::path::Path;

/// `payonce tenant --database-url DB ARGS`: its exit status and output.
async fn tenant(dir: &Path, db: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["tenant", "--database-url", db];
    all.extend_from_slice(args);
    payonce(dir, &all).output().await.unwrap()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn set_share_sets_lists_clears_and_refuses_a_share_out_of_range() {
    let dir = scratch("tenant-set-share");
    let db = format!("sqlite:{}", dir.join("tenant.db").display());
    migrate(&dir, &db, &[]).await;
    let ledger = payonce_ledger::connect(&db, 1).await.unwrap();
    let globex = TenantId::parse("globex").unwrap();

    let none = tenant(&dir, &db, &["shares"]).await;
    assert!(none.status.success(), "{none:?}");
    assert_eq!(
        stdout(&none),
        format!("no tenant has a share set: every tenant has the default, {SHARE_DEFAULT}\n")
    );

    let set = tenant(&dir, &db, &["set-share", "globex", "250"]).await;
    assert!(set.status.success(), "{set:?}");
    assert_eq!(
        stdout(&set),
        "tenant globex: share 250 (before: 100, the default)\n"
    );
    assert_eq!(
        ledger.profiles().shares().await.unwrap(),
        vec![(globex.clone(), 250)]
    );
    let listed = tenant(&dir, &db, &["shares"]).await;
    assert!(listed.status.success(), "{listed:?}");
    assert_eq!(stdout(&listed), "tenant globex: share 250\n");

    let over = (SHARE_MAX + 1).to_string();
    for refused in ["0", over.as_str(), "abc"] {
        let out = tenant(&dir, &db, &["set-share", "globex", refused]).await;
        assert_eq!(out.status.code(), Some(2), "{refused}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("share must be") && stderr.contains("between 1 and 1000"),
            "{refused}: {stderr}"
        );
        assert_eq!(stdout(&out), "", "{refused}");
        assert_eq!(
            ledger.profiles().shares().await.unwrap(),
            vec![(globex.clone(), 250)],
            "{refused} changed nothing"
        );
    }
    // Neither a share nor --default, both, or a negative number (read as a flag): usage errors.
    for args in [
        vec!["set-share", "globex"],
        vec!["set-share", "globex", "-5"],
        vec!["set-share", "globex", "300", "--default"],
    ] {
        let out = tenant(&dir, &db, &args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
    assert_eq!(
        ledger.profiles().shares().await.unwrap(),
        vec![(globex.clone(), 250)]
    );

    let cleared = tenant(&dir, &db, &["set-share", "globex", "--default"]).await;
    assert!(cleared.status.success(), "{cleared:?}");
    assert_eq!(
        stdout(&cleared),
        "tenant globex: share 100, the default (before: 250)\n"
    );
    assert_eq!(ledger.profiles().shares().await.unwrap(), vec![]);
    let none = tenant(&dir, &db, &["shares"]).await;
    assert_eq!(
        stdout(&none),
        "no tenant has a share set: every tenant has the default, 100\n"
    );
}

#[tokio::test]
async fn set_cap_sets_lists_lifts_and_refuses_a_cap_out_of_range() {
    let dir = scratch("tenant-set-cap");
    let db = format!("sqlite:{}", dir.join("tenant.db").display());
    migrate(&dir, &db, &[]).await;
    let ledger = payonce_ledger::connect(&db, 1).await.unwrap();
    let globex = TenantId::parse("globex").unwrap();

    let set = tenant(&dir, &db, &["set-cap", "globex", "25"]).await;
    assert!(set.status.success(), "{set:?}");
    assert_eq!(
        stdout(&set),
        "tenant globex: capped at 25 submissions a second (before: no cap beyond the fleet's)\n"
    );
    assert_eq!(
        ledger.profiles().caps().await.unwrap(),
        vec![(globex.clone(), 25)]
    );
    let listed = tenant(&dir, &db, &["shares"]).await;
    assert_eq!(
        stdout(&listed),
        "no tenant has a share set: every tenant has the default, 100\n\
         tenant globex: capped at 25 submissions a second\n"
    );

    let over = (CAP_PER_SECOND_MAX + 1).to_string();
    for refused in ["0", over.as_str(), "1.5", "lots"] {
        let out = tenant(&dir, &db, &["set-cap", "globex", refused]).await;
        assert_eq!(out.status.code(), Some(2), "{refused}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("a cap must be") && stderr.contains("between 1 and 100000"),
            "{refused}: {stderr}"
        );
        assert_eq!(stdout(&out), "", "{refused}");
    }
    for args in [
        vec!["set-cap", "globex"],
        vec!["set-cap", "globex", "10", "--none"],
    ] {
        let out = tenant(&dir, &db, &args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
    assert_eq!(
        ledger.profiles().caps().await.unwrap(),
        vec![(globex.clone(), 25)],
        "nothing refused changed the cap"
    );

    let lifted = tenant(&dir, &db, &["set-cap", "globex", "--none"]).await;
    assert!(lifted.status.success(), "{lifted:?}");
    assert_eq!(
        stdout(&lifted),
        "tenant globex: no cap beyond the fleet's (before: capped at 25 submissions a second)\n"
    );
    assert_eq!(ledger.profiles().caps().await.unwrap(), vec![]);
}
