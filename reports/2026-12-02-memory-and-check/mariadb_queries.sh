T="(SELECT user_id, COUNT(*) AS truth FROM notifications WHERE NOT is_read GROUP BY user_id)"
case $1 in
old) q="SELECT u.user_id, c.unread, COALESCE(t.truth, 0) AS truth FROM (SELECT user_id FROM unread_counts UNION SELECT user_id FROM notifications) u LEFT JOIN unread_counts c ON c.user_id = u.user_id LEFT JOIN $T t ON t.user_id = u.user_id ORDER BY u.user_id" ;;
new) q="SELECT c.user_id, c.unread, COALESCE(t.truth, 0) AS truth FROM unread_counts c LEFT JOIN $T t ON t.user_id = c.user_id UNION ALL SELECT n.user_id, NULL, COUNT(*) FROM notifications n WHERE NOT n.is_read AND NOT EXISTS (SELECT 1 FROM unread_counts c WHERE c.user_id = n.user_id) GROUP BY n.user_id" ;;
bare) q="SELECT user_id, COUNT(*) FROM notifications WHERE NOT is_read GROUP BY user_id" ;;
counts) q="SELECT user_id, unread FROM unread_counts ORDER BY user_id" ;;
esac
if [ "$2" = explain ]; then mariadb -h127.0.0.1 -uroot cl_h1bench -e "EXPLAIN $q"; exit; fi
s=$(date +%s.%N); mariadb -h127.0.0.1 -uroot cl_h1bench -N -e "$q" >/dev/null; e=$(date +%s.%N)
echo "$1 $(echo "$e - $s" | bc)"
