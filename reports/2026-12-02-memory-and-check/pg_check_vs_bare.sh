# usage: h1_q.sh old|new|bare  -> prints seconds for the query streamed to the client (psql to /dev/null)
case $1 in
old) q="SELECT u.user_id, c.unread, COALESCE(t.truth, 0) AS truth FROM (SELECT user_id FROM unread_counts UNION SELECT user_id FROM notifications) u LEFT JOIN unread_counts c ON c.user_id = u.user_id LEFT JOIN (SELECT user_id, count(*) AS truth FROM notifications WHERE NOT is_read GROUP BY user_id) t ON t.user_id = u.user_id ORDER BY u.user_id" ;;
new) q="SELECT COALESCE(c.user_id, t.user_id) AS user_id, c.unread, COALESCE(t.truth, 0) AS truth FROM unread_counts c FULL JOIN (SELECT user_id, count(*) AS truth FROM notifications WHERE NOT is_read GROUP BY user_id) t ON t.user_id = c.user_id" ;;
bare) q="SELECT user_id, count(*) FROM notifications WHERE NOT is_read GROUP BY user_id" ;;
esac
s=$(date +%s.%N); PGOPTIONS="-c search_path=cl_h1bench" psql -h 127.0.0.1 -U postgres -d test -Atc "$q" >/dev/null; e=$(date +%s.%N)
echo "$1 $(echo "$e - $s" | bc)"
