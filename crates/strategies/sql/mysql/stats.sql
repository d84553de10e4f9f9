-- Server-side statistics around a cell's load (`StrategyReport.cost`, docs/report.md): the
-- whole server's status counters as (counter, value) rows, on the configured account's
-- pool. MariaDB 10.11 has no Innodb_rows_*; MySQL has both sets (backend/stats.rs picks).

-- name: status  () -> (counter, value)
SHOW GLOBAL STATUS WHERE Variable_name IN ('Handler_write', 'Handler_update', 'Handler_delete',
    'Handler_read_key', 'Handler_read_next', 'Handler_read_rnd_next', 'Handler_commit', 'Handler_rollback',
    'Innodb_rows_inserted', 'Innodb_rows_updated', 'Innodb_rows_deleted', 'Innodb_rows_read',
    'Innodb_row_lock_waits', 'Innodb_row_lock_time', 'Innodb_os_log_written', 'Innodb_lsn_current',
    'Innodb_buffer_pool_read_requests', 'Innodb_buffer_pool_reads');
