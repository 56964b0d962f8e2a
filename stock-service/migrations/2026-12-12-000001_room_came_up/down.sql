DROP TABLE room_came_up;
