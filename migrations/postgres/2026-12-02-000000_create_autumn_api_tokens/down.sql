DROP TABLE IF EXISTS autumn_api_tokens;
