-- Run once by the postgres image on an empty data directory (docker-entrypoint-initdb.d):
-- the databases deploy/local/postgres creates.
CREATE DATABASE txkit_test;
CREATE DATABASE txkit_users;
CREATE DATABASE txkit_points;
