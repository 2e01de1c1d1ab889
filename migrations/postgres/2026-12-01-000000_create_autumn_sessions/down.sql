DROP TABLE IF EXISTS autumn_sessions;
