-- The CDC user binlake reads with: no table locks, only what a replica and a reader need.
CREATE USER IF NOT EXISTS 'binlake'@'%' IDENTIFIED BY 'binlake';
GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'binlake'@'%';
