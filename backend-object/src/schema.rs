//! The database schema, its migrations, and `format` (the schema and the root directory).
//!
//! Every table is keyed by inode id, never by path: a rename changes one `entries` row.
//! Ids come from sequences and are never reused, so a handle of a removed file is STALE
//! on every head and never names a newer file. See docs/OBJECT.md for each column.

use tokio_postgres::Client;

use crate::engine::Fail;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = 5;

/// Key of the advisory lock `format` holds, so two heads starting at once create the
/// schema once ("granary" in ASCII).
const FORMAT_LOCK: i64 = 0x0067_7261_6e61_7279;

/// The first migration: the whole schema of version 1.
const MIGRATION_1: &str = r"
CREATE TABLE granary_meta (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    schema_version integer NOT NULL,
    incarnation bigint NOT NULL,
    root bigint NOT NULL,
    ctime_floor_ns bigint NOT NULL
);
CREATE SEQUENCE granary_inode_ids;
CREATE SEQUENCE granary_cookies START 3;
CREATE SEQUENCE granary_slice_seq;
CREATE SEQUENCE granary_object_ids;
CREATE TABLE inodes (
    id bigint PRIMARY KEY,
    kind smallint NOT NULL,
    mode integer NOT NULL,
    uid bigint NOT NULL,
    gid bigint NOT NULL,
    nlink integer NOT NULL,
    size_bytes bigint NOT NULL DEFAULT 0,
    rdev_major bigint NOT NULL DEFAULT 0,
    rdev_minor bigint NOT NULL DEFAULT 0,
    atime_ns bigint NOT NULL,
    mtime_ns bigint NOT NULL,
    ctime_ns bigint NOT NULL,
    parent bigint,
    target bytea,
    verifier bytea,
    version bigint NOT NULL DEFAULT 1
);
CREATE TABLE entries (
    dir bigint NOT NULL REFERENCES inodes (id),
    name bytea NOT NULL,
    child bigint NOT NULL REFERENCES inodes (id),
    cookie bigint NOT NULL,
    PRIMARY KEY (dir, name)
);
CREATE UNIQUE INDEX entries_by_cookie ON entries (dir, cookie);
CREATE INDEX entries_by_child ON entries (child);
CREATE TABLE slices (
    file bigint NOT NULL REFERENCES inodes (id) ON DELETE CASCADE,
    seq bigint NOT NULL,
    offset_bytes bigint NOT NULL,
    length_bytes bigint NOT NULL,
    object bigint,
    object_offset bigint NOT NULL DEFAULT 0,
    data bytea,
    PRIMARY KEY (file, seq)
);
";

/// Version 2: objects no slice may name any more, for the garbage collector (`gc.rs`).
/// Every deleted `slices` row that named an object (a truncation, a removed file,
/// a compaction) records that object with the database's time; the collector deletes it
/// from the store only when no row names it and its grace has passed. `ON CONFLICT`
/// keeps the *latest* time, so the grace always runs from the last time a row let go of
/// the object. `slices_by_object` answers "does a row still name it" without a scan.
const MIGRATION_2: &str = r"
CREATE TABLE dead_objects (
    object bigint PRIMARY KEY,
    since timestamptz NOT NULL
);
CREATE INDEX slices_by_object ON slices (object) WHERE object IS NOT NULL;
CREATE FUNCTION granary_slice_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO dead_objects (object, since) VALUES (OLD.object, clock_timestamp())
    ON CONFLICT (object) DO UPDATE SET since = GREATEST(dead_objects.since, EXCLUDED.since);
    RETURN NULL;
END $$;
CREATE TRIGGER slices_gone AFTER DELETE ON slices
    FOR EACH ROW WHEN (OLD.object IS NOT NULL) EXECUTE FUNCTION granary_slice_gone();
UPDATE granary_meta SET schema_version = 2;
";

/// Version 3: each file's slice count, kept by the database itself, for compaction's
/// candidates and for READs (`cache.rs`: a file of more slices than a map holds is read
/// by range). Statement triggers on `slices` move `inodes.slice_count` by the rows each
/// statement added or deleted, in that statement's transaction, whatever path changed
/// them (a publish, a truncation, a compaction, a removed file's cascade), so no code
/// path can forget it; every such path holds the inode's row lock already (`meta.rs`'s
/// lock order), so the trigger's update takes no new lock. `inodes_by_slice_count` holds
/// only files of two slices or more (compaction needs two), so a round finds its
/// candidates with an index scan of that, never a scan of `slices`.
/// `slices_by_offset` lets compaction read a file's slices in offset order a page at a
/// time (keyset), without sorting them all.
const MIGRATION_3: &str = r"
ALTER TABLE inodes ADD COLUMN slice_count bigint NOT NULL DEFAULT 0;
UPDATE inodes i SET slice_count = c.n
    FROM (SELECT file, count(*) AS n FROM slices GROUP BY file) c WHERE i.id = c.file;
CREATE FUNCTION granary_slices_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE inodes i SET slice_count = i.slice_count + a.n
        FROM (SELECT file, count(*) AS n FROM added GROUP BY file) a WHERE i.id = a.file;
    RETURN NULL;
END $$;
CREATE FUNCTION granary_slices_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE inodes i SET slice_count = i.slice_count - r.n
        FROM (SELECT file, count(*) AS n FROM removed GROUP BY file) r WHERE i.id = r.file;
    RETURN NULL;
END $$;
CREATE TRIGGER slices_added AFTER INSERT ON slices REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION granary_slices_added();
CREATE TRIGGER slices_removed AFTER DELETE ON slices REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION granary_slices_removed();
CREATE INDEX inodes_by_slice_count ON inodes (slice_count, id) WHERE slice_count >= 2;
CREATE INDEX slices_by_offset ON slices (file, offset_bytes, seq);
UPDATE granary_meta SET schema_version = 3;
";

/// Version 4: byte-range locks across heads (`heads.rs`). `lock_heads` holds each head
/// that took a lock since it started (a new number per start) and until when its locks
/// count (`lease_until`, the database's clock, renewed by its heartbeat); `lock_ranges`
/// what each head holds per file, as maximal ranges of one kind (`exclusive`), the
/// offsets stored with their top bit flipped so that an unsigned 64-bit offset fits a
/// `bigint` and keeps its order. No foreign key: a head's rows are ignored from the end
/// of its lease and swept a lease later by another head's heartbeat.
/// `granary_lock_take` is the per-file lock every head takes before it reads or writes a
/// file's rows: a transaction-scoped advisory lock keyed by the inode id split into two
/// 32-bit halves (that key space is apart from the one-key locks `format`, the rename
/// lock and the collector use), taken alone in its transaction (no row lock is held by
/// then), so `meta.rs`'s lock order is untouched. `granary_lock_check` takes it and then
/// (a new statement, so a new snapshot in READ COMMITTED: it sees what the head it waited
/// for committed) returns the first live range of another head in the way.
const MIGRATION_4: &str = r"
CREATE TABLE lock_heads (
    head bigserial PRIMARY KEY,
    lease_until timestamptz NOT NULL
);
CREATE TABLE lock_ranges (
    inode bigint NOT NULL,
    head bigint NOT NULL,
    exclusive boolean NOT NULL,
    first_byte bigint NOT NULL,
    last_byte bigint NOT NULL
);
CREATE INDEX lock_ranges_by_inode ON lock_ranges (inode, head);
CREATE INDEX lock_ranges_by_head ON lock_ranges (head);
CREATE FUNCTION granary_lock_take(p_inode bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock((p_inode >> 32)::integer,
                                  ((p_inode & 4294967295) - 2147483648)::integer);
END $$;
CREATE FUNCTION granary_lock_others(p_inode bigint, p_head bigint, p_exclusive boolean,
                                    p_first bigint, p_last bigint)
RETURNS TABLE (head bigint, exclusive boolean, first_byte bigint, last_byte bigint)
LANGUAGE sql STABLE AS $$
    SELECT r.head, r.exclusive, r.first_byte, r.last_byte
    FROM lock_ranges r JOIN lock_heads h ON h.head = r.head
    WHERE r.inode = p_inode AND r.head <> p_head AND h.lease_until > now()
      AND r.first_byte <= p_last AND r.last_byte >= p_first AND (r.exclusive OR p_exclusive)
    ORDER BY r.first_byte, r.head
    LIMIT 1
$$;
CREATE FUNCTION granary_lock_check(p_inode bigint, p_head bigint, p_exclusive boolean,
                                   p_first bigint, p_last bigint)
RETURNS TABLE (head bigint, exclusive boolean, first_byte bigint, last_byte bigint)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM granary_lock_take(p_inode);
    RETURN QUERY SELECT * FROM granary_lock_others(p_inode, p_head, p_exclusive, p_first, p_last);
END $$;
UPDATE granary_meta SET schema_version = 4;
";

/// Version 5: share reservations across heads (`shares.rs`). A file some head denies an
/// access on is *watched* (`share_watches`, an id from `granary_share_watch_ids`, taken
/// under a one-key advisory lock so ids become visible in order: a head that read the
/// watches up to id N has seen every watch below N);
/// on a watched file every head records what its holders have and deny
/// (`share_holds`, one row per head and file, the union of its holders'), and a head
/// says in `lock_heads.share_acked` the largest watch id up to which it has recorded
/// every watched file. A deny is granted only once every other live head has acked the
/// file's watch, so an OPEN that denies nothing on an unwatched file asks the database
/// nothing more. `granary_share_check` takes the file's per-inode lock (that of
/// `granary_lock_take`), then returns the first other live head in the way and whether
/// the file's watch is acked by every other live head; `granary_share_put` writes this
/// head's row (only while the file is watched, which a deny makes it again; true when
/// it wrote one) and lets go of a watch no live head
/// denies through any more, once it is older than `p_keep_secs` (a head waiting for its
/// acks has given up by then).
const MIGRATION_5: &str = r"
ALTER TABLE lock_heads ADD COLUMN share_acked bigint NOT NULL DEFAULT 0;
CREATE SEQUENCE granary_share_watch_ids;
CREATE TABLE share_watches (
    inode bigint PRIMARY KEY,
    id bigint NOT NULL,
    since timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE share_holds (
    inode bigint NOT NULL,
    head bigint NOT NULL,
    access integer NOT NULL,
    deny integer NOT NULL,
    PRIMARY KEY (inode, head)
);
CREATE INDEX share_holds_by_head ON share_holds (head);
CREATE FUNCTION granary_share_watch(p_inode bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE w bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(29139795149006181);
    INSERT INTO share_watches (inode, id) VALUES (p_inode, nextval('granary_share_watch_ids'))
        ON CONFLICT (inode) DO NOTHING;
    SELECT id INTO w FROM share_watches WHERE inode = p_inode;
    RETURN w;
END $$;
CREATE FUNCTION granary_share_check(p_inode bigint, p_head bigint, p_access integer,
                                    p_deny integer)
RETURNS TABLE (head bigint, access integer, deny integer, watch bigint, acked boolean)
LANGUAGE plpgsql AS $$
DECLARE w bigint;
BEGIN
    PERFORM granary_lock_take(p_inode);
    SELECT sw.id INTO w FROM share_watches sw WHERE sw.inode = p_inode;
    RETURN QUERY
    SELECT c.head, c.access, c.deny, w,
           w IS NOT NULL AND NOT EXISTS (
               SELECT 1 FROM lock_heads h
               WHERE h.head <> p_head AND h.lease_until > now() AND h.share_acked < w)
    FROM (SELECT 1) one LEFT JOIN LATERAL (
        SELECT s.head, s.access, s.deny
        FROM share_holds s JOIN lock_heads h ON h.head = s.head
        WHERE s.inode = p_inode AND s.head <> p_head AND h.lease_until > now()
          AND ((s.deny & p_access) <> 0 OR (p_deny & s.access) <> 0)
        ORDER BY s.head
        LIMIT 1) c ON true;
END $$;
CREATE FUNCTION granary_share_put(p_inode bigint, p_head bigint, p_access integer,
                                  p_deny integer, p_keep_secs double precision)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE written boolean := false;
BEGIN
    IF p_deny <> 0 AND NOT EXISTS (SELECT 1 FROM share_watches WHERE inode = p_inode) THEN
        -- A deny recorded late (its first write failed, or this head's rows were swept
        -- while it was cut off): the file is watched again rather than left unseen.
        PERFORM granary_share_watch(p_inode);
    END IF;
    DELETE FROM share_holds WHERE inode = p_inode AND head = p_head;
    IF (p_access <> 0 OR p_deny <> 0)
       AND EXISTS (SELECT 1 FROM share_watches WHERE inode = p_inode) THEN
        INSERT INTO share_holds (inode, head, access, deny)
        VALUES (p_inode, p_head, p_access, p_deny);
        written := true;
    END IF;
    IF p_deny = 0 AND NOT EXISTS (
           SELECT 1 FROM share_holds s JOIN lock_heads h ON h.head = s.head
           WHERE s.inode = p_inode AND s.deny <> 0 AND h.lease_until > now()) THEN
        WITH gone AS (DELETE FROM share_watches
                      WHERE inode = p_inode
                        AND since < now() - make_interval(secs => p_keep_secs)
                      RETURNING inode)
        DELETE FROM share_holds WHERE inode IN (SELECT inode FROM gone);
        IF FOUND THEN
            written := false;
        END IF;
    END IF;
    RETURN written;
END $$;
UPDATE granary_meta SET schema_version = 5;
";

/// The migrations after version 1, each bringing the schema from the version before it
/// to the next (`MIGRATIONS[0]` makes version 2).
const MIGRATIONS: [&str; 4] = [MIGRATION_2, MIGRATION_3, MIGRATION_4, MIGRATION_5];

/// Creates the schema and the root directory if the database has none yet; brings one of
/// an older version up to this one; refuses a newer one. Safe to run from several heads
/// at once.
///
/// Returns true if this call created the file system.
pub(crate) async fn format(client: &mut Client, now_ns: i64) -> Result<bool, Fail> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&FORMAT_LOCK])
        .await?;
    let exists = tx
        .query_one("SELECT to_regclass('granary_meta') IS NOT NULL", &[])
        .await?
        .get::<_, bool>(0);
    if exists {
        let version: i32 = tx
            .query_one("SELECT schema_version FROM granary_meta", &[])
            .await?
            .get(0);
        if (1..SCHEMA_VERSION).contains(&version) {
            let done = usize::try_from(version - 1).unwrap_or(0);
            for step in MIGRATIONS.iter().skip(done) {
                tx.batch_execute(step).await?;
            }
            tx.commit().await?;
            tracing::info!(
                from = version,
                to = SCHEMA_VERSION,
                "object backend: schema migrated"
            );
            return Ok(false);
        }
        if version != SCHEMA_VERSION {
            let why = unknown_version(version);
            tracing::error!("object backend: {why}");
            return Err(Fail::Refused(why));
        }
        tx.commit().await?;
        return Ok(false);
    }
    tx.batch_execute(MIGRATION_1).await?;
    for step in MIGRATIONS {
        tx.batch_execute(step).await?;
    }
    let root: i64 = tx
        .query_one("SELECT nextval('granary_inode_ids')", &[])
        .await?
        .get(0);
    tx.execute(
        "INSERT INTO inodes (id, kind, mode, uid, gid, nlink, size_bytes, atime_ns, mtime_ns, \
         ctime_ns, parent) VALUES ($1, $2, $3, 0, 0, 2, 0, $4, $4, $4, $1)",
        &[&root, &crate::meta::KIND_DIR, &0o777i32, &now_ns],
    )
    .await?;
    let incarnation = i64::from(rand::random::<u32>());
    tx.execute(
        "INSERT INTO granary_meta (schema_version, incarnation, root, ctime_floor_ns) \
         VALUES ($1, $2, $3, $4)",
        &[&SCHEMA_VERSION, &incarnation, &root, &now_ns],
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Why a head refuses a database whose schema is of `version`, for a person: what it
/// means and what to do.
fn unknown_version(version: i32) -> String {
    if version > SCHEMA_VERSION {
        format!(
            "the database's schema is version {version}, newer than this granary knows \
             (1 to {SCHEMA_VERSION}): a newer granary formatted or migrated it; run that \
             version on this head too, or name another database"
        )
    } else {
        format!(
            "the database's schema is version {version}, which no granary writes (this one \
             knows 1 to {SCHEMA_VERSION}): name the right database, or a new one for \
             `granary format`"
        )
    }
}

/// What every head reads once at start.
pub(crate) struct Meta {
    pub root: i64,
    pub incarnation: u32,
    pub ctime_floor_ns: i64,
}

pub(crate) async fn read_meta(client: &Client) -> Result<Meta, Fail> {
    let row = client
        .query_one(
            "SELECT root, incarnation, ctime_floor_ns FROM granary_meta",
            &[],
        )
        .await?;
    Ok(Meta {
        root: row.get(0),
        incarnation: u32::try_from(row.get::<_, i64>(1)).unwrap_or(0),
        ctime_floor_ns: row.get(2),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Key of the advisory lock every new watch of `share_watches` is taken under (in
    /// `granary_share_watch`, written out in `MIGRATION_5`), so watch ids become visible
    /// in the order they were taken: a head that read the watches up to id N has seen
    /// every watch below N. Apart from [`FORMAT_LOCK`] and the two-key per-inode locks.
    const SHARE_WATCH_LOCK: i64 = 29_139_795_149_006_181;

    #[test]
    fn the_watch_lock_is_the_one_the_migration_takes() {
        assert!(MIGRATION_5.contains(&format!("pg_advisory_xact_lock({SHARE_WATCH_LOCK})")));
        assert_ne!(SHARE_WATCH_LOCK, FORMAT_LOCK);
        assert_eq!(
            MIGRATIONS.len(),
            usize::try_from(SCHEMA_VERSION - 1).unwrap()
        );
    }
}
