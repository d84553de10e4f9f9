s=$(date +%s.%N)
mariadb -h127.0.0.1 -uroot cl_h1bench -N -e "SELECT user_id, unread FROM unread_counts ORDER BY user_id" >/dev/null &
mariadb -h127.0.0.1 -uroot cl_h1bench -N -e "SELECT user_id, COUNT(*) AS truth FROM notifications WHERE NOT is_read GROUP BY user_id ORDER BY user_id" >/dev/null
wait
e=$(date +%s.%N); echo "merged $(echo "$e - $s" | bc)"
