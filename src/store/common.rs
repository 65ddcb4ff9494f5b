//! The part of the [`Store`](super::Store) implementation both databases share, written once.
//!
//! `impl_store!` expands to the whole `impl Store for …` of a backend; the backend supplies
//! only what differs: its pools (`read_pool`, `write_pool`), its migrations and the four
//! inherent methods `migrate_impl`, `commit_batch_impl`, `listen_impl` and `announce_impl`.

macro_rules! impl_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::Store for $store {
            async fn migrate(&self) -> Result<(), StoreError> {
                self.migrate_impl().await
            }

            fn pool_stats(&self) -> (u32, usize) {
                (self.read_pool().size(), self.read_pool().num_idle())
            }

            fn is_shared(&self) -> bool {
                Self::SHARED
            }

            async fn ping(&self) -> Result<(), StoreError> {
                sqlx::query("SELECT 1").execute(self.read_pool()).await?;
                Ok(())
            }

            async fn find_thread(&self, tenant: &str, thread_id: &str) -> Result<Option<ThreadRow>, StoreError> {
                sqlx::query(sql::FIND_THREAD)
                    .bind(tenant)
                    .bind(thread_id)
                    .fetch_optional(self.read_pool())
                    .await?
                    .as_ref()
                    .map(rows::thread)
                    .transpose()
            }

            async fn thread_by_pk(&self, pk: i64) -> Result<Option<ThreadRow>, StoreError> {
                sqlx::query(sql::THREAD_BY_PK)
                    .bind(pk)
                    .fetch_optional(self.read_pool())
                    .await?
                    .as_ref()
                    .map(rows::thread)
                    .transpose()
            }

            async fn thread_turns(&self, thread: i64) -> Result<Vec<TurnRow>, StoreError> {
                sqlx::query(&rows::select_turns("thread = $1 ORDER BY ordinal"))
                    .bind(thread)
                    .fetch_all(self.read_pool())
                    .await?
                    .iter()
                    .map(rows::turn)
                    .collect()
            }

            async fn find_run(&self, thread: i64, run_id: &str) -> Result<Option<(TurnRow, i64)>, StoreError> {
                let Some(run) =
                    sqlx::query(sql::RUN_TURN).bind(thread).bind(run_id).fetch_optional(self.read_pool()).await?
                else {
                    return Ok(None);
                };
                let (turn, start_seq): (i64, i64) = (run.try_get("turn")?, run.try_get("start_seq")?);
                Ok(self.turn(turn).await?.map(|turn| (turn, start_seq)))
            }

            async fn find_turn(&self, thread: i64, public_id: &str) -> Result<Option<TurnRow>, StoreError> {
                sqlx::query(&rows::select_turns("thread = $1 AND public_id = $2"))
                    .bind(thread)
                    .bind(public_id)
                    .fetch_optional(self.read_pool())
                    .await?
                    .as_ref()
                    .map(rows::turn)
                    .transpose()
            }

            async fn turn(&self, pk: i64) -> Result<Option<TurnRow>, StoreError> {
                sqlx::query(&rows::select_turns("id = $1"))
                    .bind(pk)
                    .fetch_optional(self.read_pool())
                    .await?
                    .as_ref()
                    .map(rows::turn)
                    .transpose()
            }

            async fn start_turn(&self, new: &NewTurn) -> Result<StartTurn, StoreError> {
                let mut tx = self.write_pool().begin().await?;
                sqlx::query(sql::INSERT_THREAD)
                    .bind(&new.tenant)
                    .bind(&new.thread_id)
                    .bind(new.owner.kind.as_str())
                    .bind(&new.owner.id)
                    .bind(new.at_ms)
                    .execute(&mut *tx)
                    .await?;
                let thread_row =
                    sqlx::query(sql::FIND_THREAD).bind(&new.tenant).bind(&new.thread_id).fetch_one(&mut *tx).await?;
                let thread = rows::thread(&thread_row)?;
                if thread.owner != new.owner {
                    return Ok(StartTurn::NotOwner);
                }
                let existing =
                    sqlx::query(sql::RUN_TURN).bind(thread.pk).bind(&new.run_id).fetch_optional(&mut *tx).await?;
                if existing.is_some() {
                    tx.rollback().await?;
                    return match self.find_run(thread.pk, &new.run_id).await? {
                        Some((turn, start_seq)) => Ok(StartTurn::RunExists(turn, start_seq)),
                        None => Ok(StartTurn::Conflict),
                    };
                }
                let inserted = sqlx::query(&rows::insert_turn_returning())
                    .bind(&new.public_id)
                    .bind(thread.pk)
                    .bind(new.ordinal)
                    .bind(&new.agent)
                    .bind(&new.user_message_id)
                    .bind(&new.user_text)
                    .bind(&new.started_by)
                    .bind(new.at_ms)
                    .bind(&new.owner_instance)
                    .bind(new.lease_until_ms)
                    .bind(&new.client_tools)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(turn_row) = inserted else {
                    return Ok(StartTurn::Conflict);
                };
                let turn = rows::turn(&turn_row)?;
                for audit in &new.audit {
                    insert_audit!(audit, &mut *tx);
                }
                let run_added = sqlx::query(sql::INSERT_RUN)
                    .bind(thread.pk)
                    .bind(&new.run_id)
                    .bind(turn.pk)
                    .bind(0_i64)
                    .bind(new.at_ms)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if run_added == 0 {
                    // The same run id raced us in another transaction: drop ours, follow theirs.
                    tx.rollback().await?;
                    return match self.find_run(thread.pk, &new.run_id).await? {
                        Some((turn, start_seq)) => Ok(StartTurn::RunExists(turn, start_seq)),
                        None => Ok(StartTurn::Conflict),
                    };
                }
                tx.commit().await?;
                Ok(StartTurn::Started { thread, turn })
            }

            async fn add_run(
                &self,
                thread: i64,
                run_id: &str,
                turn: i64,
                start_seq: i64,
                at_ms: i64,
            ) -> Result<i64, StoreError> {
                sqlx::query(sql::INSERT_RUN)
                    .bind(thread)
                    .bind(run_id)
                    .bind(turn)
                    .bind(start_seq)
                    .bind(at_ms)
                    .execute(self.write_pool())
                    .await?;
                let row = sqlx::query(sql::RUN_TURN).bind(thread).bind(run_id).fetch_one(self.write_pool()).await?;
                Ok(row.try_get("turn")?)
            }

            async fn commit_batch(&self, batch: &[TurnWrites]) -> Result<BatchOutcome, StoreError> {
                self.commit_batch_impl(batch).await
            }

            async fn events_after(
                &self,
                turn: i64,
                after_seq: i64,
                limit: i64,
            ) -> Result<Vec<StoredEvent>, StoreError> {
                let in_range = sqlx::query(sql::EVENTS_IN_RANGE)
                    .bind(turn)
                    .bind(after_seq)
                    .bind(limit)
                    .fetch_all(self.read_pool())
                    .await?;
                let page = if in_range.is_empty() {
                    sqlx::query(sql::EVENTS_AFTER)
                        .bind(turn)
                        .bind(after_seq)
                        .bind(limit)
                        .fetch_all(self.read_pool())
                        .await?
                } else {
                    in_range
                };
                page.iter().map(rows::event).collect()
            }

            async fn last_seq(&self, turn: i64) -> Result<i64, StoreError> {
                let row = sqlx::query(sql::LAST_SEQ).bind(turn).fetch_one(self.read_pool()).await?;
                Ok(row.try_get("last")?)
            }

            async fn tenant_usage(
                &self,
                tenant: &str,
                since_ms: i64,
                tokens_since_ms: i64,
            ) -> Result<TenantUsage, StoreError> {
                let row = sqlx::query(sql::TENANT_USAGE)
                    .bind(tenant)
                    .bind(since_ms)
                    .bind(tokens_since_ms)
                    .fetch_one(self.read_pool())
                    .await?;
                Ok(TenantUsage {
                    running_turns: row.try_get("running_turns")?,
                    turns_started: row.try_get("turns_started")?,
                    tokens: row.try_get("tokens")?,
                })
            }

            async fn thread_state(&self, thread: i64) -> Result<Option<String>, StoreError> {
                let row = sqlx::query("SELECT state FROM threads WHERE id = $1")
                    .bind(thread)
                    .fetch_optional(self.read_pool())
                    .await?;
                Ok(match row {
                    Some(row) => row.try_get("state")?,
                    None => None,
                })
            }

            async fn set_thread_state(&self, thread: i64, state: &str) -> Result<(), StoreError> {
                sqlx::query("UPDATE threads SET state = $2 WHERE id = $1")
                    .bind(thread)
                    .bind(state)
                    .execute(self.write_pool())
                    .await?;
                Ok(())
            }

            async fn add_tokens(&self, tenant: &str, turn: i64, tokens: i64, at_ms: i64) -> Result<(), StoreError> {
                sqlx::query(sql::ADD_TOKENS)
                    .bind(tenant)
                    .bind(turn)
                    .bind(tokens)
                    .bind(at_ms)
                    .execute(self.write_pool())
                    .await?;
                Ok(())
            }

            async fn notes(&self, thread: i64) -> Result<Vec<String>, StoreError> {
                let found = sqlx::query(sql::NOTES).bind(thread).fetch_all(self.read_pool()).await?;
                found.iter().map(|r| r.try_get("body").map_err(StoreError::from)).collect()
            }

            async fn request_cancel(&self, turn: i64) -> Result<bool, StoreError> {
                let done = sqlx::query("UPDATE turns SET cancel_requested = TRUE WHERE id = $1 AND status = 'running'")
                    .bind(turn)
                    .execute(self.write_pool())
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn claim_lapsed_turn(
                &self,
                instance: &str,
                now_ms: i64,
                lease_until_ms: i64,
                include_own: bool,
            ) -> Result<Option<TurnRow>, StoreError> {
                sqlx::query(&rows::claim_lapsed_turn(Self::SKIP_LOCKED, include_own))
                    .bind(instance)
                    .bind(lease_until_ms)
                    .bind(now_ms)
                    .fetch_optional(self.write_pool())
                    .await?
                    .as_ref()
                    .map(rows::turn)
                    .transpose()
            }

            async fn renew_leases(
                &self,
                instance: &str,
                lease_until_ms: i64,
                held: &[(i64, i64)],
            ) -> Result<Vec<i64>, StoreError> {
                if held.is_empty() {
                    return Ok(Vec::new());
                }
                self.renew_impl(instance, lease_until_ms, held).await
            }

            async fn release_turn(&self, turn: i64, instance: &str, epoch: i64) -> Result<(), StoreError> {
                sqlx::query(sql::RELEASE_TURN).bind(turn).bind(instance).bind(epoch).execute(self.write_pool()).await?;
                Ok(())
            }

            async fn turn_interrupts(&self, turn: i64) -> Result<Vec<InterruptRow>, StoreError> {
                sqlx::query(sql::TURN_INTERRUPTS)
                    .bind(turn)
                    .fetch_all(self.read_pool())
                    .await?
                    .iter()
                    .map(rows::interrupt)
                    .collect()
            }

            async fn find_interrupt(&self, id: &str) -> Result<Option<InterruptRow>, StoreError> {
                sqlx::query(sql::FIND_INTERRUPT)
                    .bind(id)
                    .fetch_optional(self.read_pool())
                    .await?
                    .as_ref()
                    .map(rows::interrupt)
                    .transpose()
            }

            async fn lapsed_interrupts(&self, now_ms: i64) -> Result<Vec<InterruptRow>, StoreError> {
                sqlx::query(sql::LAPSED_INTERRUPTS)
                    .bind(now_ms)
                    .fetch_all(self.read_pool())
                    .await?
                    .iter()
                    .map(rows::interrupt)
                    .collect()
            }

            async fn decide_interrupts(
                &self,
                turn: i64,
                decisions: &[Decision],
                marker: &StoredEvent,
                audit: &[AuditEntry],
                instance: &str,
                lease_until_ms: i64,
            ) -> Result<Decided, StoreError> {
                let mut tx = self.write_pool().begin_with(Self::BEGIN_WRITE).await?;
                // Deciders of one turn queue up here, so the decision event's seq is theirs alone;
                // and only a waiting turn takes decisions (or client results): a running one has a
                // runner appending, whose numbering a decision event would cut into.
                let status: Option<(String,)> =
                    sqlx::query_as(&format!("SELECT status FROM turns WHERE id = $1 {}", Self::LOCK_ROW))
                        .bind(turn)
                        .fetch_optional(&mut *tx)
                        .await?;
                if status.as_ref().map(|(s,)| s.as_str()) != Some(TurnStatus::Waiting.as_str()) {
                    tx.rollback().await?;
                    return Ok(Decided::AlreadyDecided);
                }
                let at_ms = marker.at_ms;
                for decision in decisions {
                    let changed = sqlx::query(sql::DECIDE_INTERRUPT)
                        .bind(decision.status.as_str())
                        .bind(&decision.decision)
                        .bind(&decision.decided_by)
                        .bind(&decision.decided_via)
                        .bind(at_ms)
                        .bind(&decision.interrupt_id)
                        .bind(turn)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if changed == 0 {
                        tx.rollback().await?;
                        return Ok(Decided::AlreadyDecided);
                    }
                }
                let last: i64 = sqlx::query(sql::LAST_SEQ).bind(turn).fetch_one(&mut *tx).await?.try_get("last")?;
                let seq = last + 1;
                let body = std::str::from_utf8(&marker.body)
                    .map_err(|_| StoreError::Corrupt("event body is not UTF-8".into()))?;
                sqlx::query(sql::INSERT_EVENT)
                    .bind(turn)
                    .bind(seq)
                    .bind(marker.kind as i16)
                    .bind(body)
                    .bind(at_ms)
                    .execute(&mut *tx)
                    .await?;
                for decision in decisions {
                    sqlx::query(sql::MARK_DECIDED_SEQ).bind(seq).bind(&decision.interrupt_id).execute(&mut *tx).await?;
                }
                // The decisions' audit rows commit with them: no decision without its record.
                for entry in audit {
                    insert_audit!(entry, &mut *tx);
                }
                let open: i64 =
                    sqlx::query(sql::OPEN_INTERRUPTS_LEFT).bind(turn).fetch_one(&mut *tx).await?.try_get("open")?;
                let resumed = if open == 0 {
                    sqlx::query(sql::RESUME_TURN)
                        .bind(instance)
                        .bind(lease_until_ms)
                        .bind(turn)
                        .fetch_optional(&mut *tx)
                        .await?
                        .map(|row| row.try_get::<i64, _>("epoch"))
                        .transpose()?
                } else {
                    None
                };
                tx.commit().await?;
                Ok(Decided::Recorded { seq, resumed })
            }

            async fn row_counts(&self) -> Result<RowCounts, StoreError> {
                let row = sqlx::query(sql::ROW_COUNTS).fetch_one(self.read_pool()).await?;
                rows::counts(&row)
            }

            async fn create_api_key(&self, key: &ApiKeyRow, audit: &AuditEntry) -> Result<(), StoreError> {
                let mut tx = self.write_pool().begin().await?;
                sqlx::query(sql::INSERT_API_KEY)
                    .bind(&key.id)
                    .bind(&key.tenant)
                    .bind(&key.name)
                    .bind(key.kind.as_str())
                    .bind(&key.scopes)
                    .bind(&key.secret_sha256)
                    .bind(&key.created_by)
                    .bind(key.created_at_ms)
                    .bind(key.revoked_at_ms)
                    .execute(&mut *tx)
                    .await?;
                insert_audit!(audit, &mut *tx);
                tx.commit().await?;
                Ok(())
            }

            async fn find_api_key(&self, id: &str) -> Result<Option<ApiKeyRow>, StoreError> {
                sqlx::query(sql::FIND_API_KEY)
                    .bind(id)
                    .fetch_optional(self.read_pool())
                    .await?
                    .as_ref()
                    .map(rows::api_key)
                    .transpose()
            }

            async fn list_api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyRow>, StoreError> {
                let found = match tenant {
                    Some(tenant) => sqlx::query(sql::TENANT_API_KEYS).bind(tenant).fetch_all(self.read_pool()).await?,
                    None => sqlx::query(sql::ALL_API_KEYS).fetch_all(self.read_pool()).await?,
                };
                found.iter().map(rows::api_key).collect()
            }

            async fn revoke_api_key(&self, tenant: &str, id: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
                let mut tx = self.write_pool().begin().await?;
                let revoked = sqlx::query(sql::REVOKE_API_KEY)
                    .bind(audit.at_ms)
                    .bind(tenant)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if revoked == 0 {
                    tx.rollback().await?;
                    return Ok(false);
                }
                insert_audit!(audit, &mut *tx);
                tx.commit().await?;
                Ok(true)
            }

            async fn revoked_keys_since(&self, since_ms: i64) -> Result<Vec<String>, StoreError> {
                let found = sqlx::query(sql::REVOKED_SINCE).bind(since_ms).fetch_all(self.read_pool()).await?;
                found.iter().map(|r| r.try_get("id").map_err(StoreError::from)).collect()
            }

            async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
                insert_audit!(entry, self.write_pool());
                Ok(())
            }

            async fn audit_rows(
                &self,
                tenant: Option<&str>,
                since_ms: i64,
                limit: i64,
            ) -> Result<Vec<AuditRow>, StoreError> {
                let found = match tenant {
                    Some(tenant) => {
                        sqlx::query(sql::TENANT_AUDIT)
                            .bind(tenant)
                            .bind(since_ms)
                            .bind(limit)
                            .fetch_all(self.read_pool())
                            .await?
                    }
                    None => sqlx::query(sql::ALL_AUDIT).bind(since_ms).bind(limit).fetch_all(self.read_pool()).await?,
                };
                found.iter().map(rows::audit).collect()
            }

            async fn listen_for_appends(
                &self,
            ) -> Result<Option<tokio::sync::mpsc::Receiver<Vec<(i64, i64)>>>, StoreError> {
                self.listen_impl().await
            }

            async fn announce_appends(&self, appended: &[(i64, i64)]) -> Result<(), StoreError> {
                self.announce_impl(appended).await
            }
        }
    };
}

/// Appends one audit row on `$executor` (a pool or an open transaction).
macro_rules! insert_audit {
    ($entry:expr, $executor:expr) => {
        sqlx::query(sql::INSERT_AUDIT)
            .bind($entry.at_ms)
            .bind(&$entry.tenant)
            .bind(&$entry.action)
            .bind(&$entry.actor)
            .bind(&$entry.via)
            .bind(&$entry.detail)
            .execute($executor)
            .await?;
    };
}

/// Runs each non-event op of a batch (notes, checkpoints, finished turns) on `$tx`.
macro_rules! apply_side_ops {
    ($tx:expr, $ops:expr) => {
        for op in $ops {
            match op {
                WriteOp::Event { .. } => {}
                WriteOp::PinNote { thread, note_no, body } => {
                    sqlx::query(sql::INSERT_NOTE).bind(thread).bind(note_no).bind(body).execute(&mut *$tx).await?;
                }
                WriteOp::Checkpoint { turn, checkpoint } => {
                    sqlx::query(sql::SET_CHECKPOINT).bind(checkpoint).bind(turn).execute(&mut *$tx).await?;
                }
                WriteOp::FinishTurn { turn, status, at_ms } => {
                    sqlx::query(sql::FINISH_TURN)
                        .bind(status.as_str())
                        .bind(at_ms)
                        .bind(turn)
                        .execute(&mut *$tx)
                        .await?;
                }
                WriteOp::OpenInterrupt(row) => {
                    sqlx::query(sql::INSERT_INTERRUPT)
                        .bind(&row.id)
                        .bind(row.thread)
                        .bind(row.turn)
                        .bind(&row.shown)
                        .bind(&row.deciders)
                        .bind(row.four_eyes)
                        .bind(&row.started_by)
                        .bind(row.expires_at_ms)
                        .bind(row.created_at_ms)
                        .execute(&mut *$tx)
                        .await?;
                    sqlx::query(sql::WAIT_TURN).bind(row.turn).execute(&mut *$tx).await?;
                }
                WriteOp::WaitTurn { turn } => {
                    sqlx::query(sql::WAIT_TURN).bind(turn).execute(&mut *$tx).await?;
                }
            }
        }
    };
}
