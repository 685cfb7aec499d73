p='/work/wt/objseq/backend-object/src/data.rs'
s=open(p).read()
def rep(a,b):
    global s
    assert s.count(a)==1,(a,s.count(a))
    s=s.replace(a,b)
rep("""    let lock = inner.pending.publish_lock(file);
    let _one_at_a_time = lock.lock().await;
    if inner.pending.fits(file, len) || start_upload(inner, file, Some(len)) {
        return Ok(());
    }
    let flying = inner.pending.uploads_in_flight(file);
    if !flying.is_empty() {
        futures::future::select_all(flying).await;
        publish_locked(inner, file, Commit::Stored).await?;
        if inner.pending.fits(file, len) || start_upload(inner, file, Some(len)) {
            return Ok(());
        }
    }
    publish_locked(inner, file, Commit::Oldest).await?;
    Ok(())""","""    let t0 = std::time::Instant::now();
    let lock = inner.pending.publish_lock(file);
    let _one_at_a_time = lock.lock().await;
    let waited = t0.elapsed().as_millis() as u64;
    if inner.pending.fits(file, len) || start_upload(inner, file, Some(len)) {
        tracing::warn!(target: "objseq", file, lock_ms = waited, ms = t0.elapsed().as_millis() as u64, how = "none", "MAKE_ROOM");
        return Ok(());
    }
    let flying = inner.pending.uploads_in_flight(file);
    if !flying.is_empty() {
        futures::future::select_all(flying).await;
        publish_locked(inner, file, Commit::Stored).await?;
        if inner.pending.fits(file, len) || start_upload(inner, file, Some(len)) {
            tracing::warn!(target: "objseq", file, lock_ms = waited, ms = t0.elapsed().as_millis() as u64, how = "any", "MAKE_ROOM");
            return Ok(());
        }
    }
    publish_locked(inner, file, Commit::Oldest).await?;
    tracing::warn!(target: "objseq", file, lock_ms = waited, ms = t0.elapsed().as_millis() as u64, how = "publish", "MAKE_ROOM");
    Ok(())""")
rep("""        async move {
            let body = payload(&snap.extents);""","""        async move {
            let body = payload(&snap.extents);
            let t0 = std::time::Instant::now();
            let n = body.content_length();""")
rep("""            task.pending.upload_over(file);""","""            task.pending.upload_over(file);
            tracing::warn!(target: "objseq", n, ms = t0.elapsed().as_millis() as u64, "BG_UPLOAD");""")
open(p,'w').write(s)
p='/work/wt/objseq/backend-object/src/lib.rs'
s=open(p).read()
rep("""            let bounded =
                tokio::time::timeout(limits::OPERATION_TIMEOUT, data::publish(&inner, file));
            let done = bounded.await.unwrap_or(Err(Fail::Timeout));""","""            let t0 = std::time::Instant::now();
            let bounded =
                tokio::time::timeout(limits::OPERATION_TIMEOUT, data::publish(&inner, file));
            let done = bounded.await.unwrap_or(Err(Fail::Timeout));
            tracing::warn!(target: "objseq", file, ms = t0.elapsed().as_millis() as u64, "TIMER publish");""")
open(p,'w').write(s)
